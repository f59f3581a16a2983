import { type Env, readVar, schemaVar } from '../config/env.js';
import { intVar } from '../config/vars.js';
import type { CleanupOptions } from './cleanup-options.js';

/** SQS keeps a message at most 14 days; a dedupe row must outlive any redelivery. */
const SQS_MAX_RETENTION_DAYS = 14;

/**
 * Reads and validates the cleanup function's environment once (at cold
 * start). Throws a `ConfigError` naming the first bad variable.
 *
 * - `OUTBOX_RETENTION_DAYS` (default 7; 0 deletes published rows at the next run)
 * - `PROCESSED_EVENTS_RETENTION_DAYS` (default 30; under 14 draws a warning)
 * - `OUTBOX_DEAD_LETTER_RETENTION_DAYS` (unset: dead letters are kept until redriven)
 * - `OUTBOX_REPLAY_RETENTION_DAYS` (default 365: replay audit rows; never while an event of theirs waits)
 * - `CLEANUP_BATCH_SIZE` (default 5000), `CLEANUP_SAFETY_MARGIN_MS` (default 10000)
 * - `CLEANUP_MAX_ROWS_PER_SECOND` (unset: no limit)
 *
 * @example
 * const options = loadCleanupConfig({ OUTBOX_RETENTION_DAYS: '14' });
 * // → { outboxRetentionDays: 14, processedEventsRetentionDays: undefined, ... } (defaults applied later)
 */
export function loadCleanupConfig(env: Env = process.env): CleanupOptions {
  const options: CleanupOptions = {
    outboxRetentionDays: readVar(env, 'OUTBOX_RETENTION_DAYS', intVar(0, 3650)),
    processedEventsRetentionDays: readVar(env, 'PROCESSED_EVENTS_RETENTION_DAYS', intVar(1, 3650)),
    deadLetterRetentionDays: readVar(env, 'OUTBOX_DEAD_LETTER_RETENTION_DAYS', intVar(1, 36500)) ?? null,
    replayRetentionDays: readVar(env, 'OUTBOX_REPLAY_RETENTION_DAYS', intVar(1, 36500)),
    batchSize: readVar(env, 'CLEANUP_BATCH_SIZE', intVar(1, 50_000)),
    safetyMarginMs: readVar(env, 'CLEANUP_SAFETY_MARGIN_MS', intVar(0, 900_000)),
    maxRowsPerSecond: readVar(env, 'CLEANUP_MAX_ROWS_PER_SECOND', intVar(1, 10_000_000)) ?? null,
    schema: schemaVar(env),
  };
  const dedupeDays = options.processedEventsRetentionDays;
  if (dedupeDays !== undefined && dedupeDays < SQS_MAX_RETENTION_DAYS) {
    // Not fatal (a queue may keep messages for less), but say so where it is decided.
    process.emitWarning(
      `PROCESSED_EVENTS_RETENTION_DAYS=${dedupeDays} is under SQS's maximum message retention (${SQS_MAX_RETENTION_DAYS} days); a message redelivered after its dedupe row is gone is handled twice`,
    );
  }
  return options;
}
