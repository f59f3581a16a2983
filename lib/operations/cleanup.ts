import type { Queryable } from '../db/queryable.js';
import { withSchemaErrors } from '../db/schema.js';
import { noMetrics, type OutboxLogger, type OutboxMetrics, silentLogger } from '../observer.js';
import { deleteIdleAggregateLocks } from '../sql/cleanup-aggregate-locks.js';
import { cleanupCutoffs } from '../sql/cleanup-cutoffs.js';
import { deleteProcessedOutboxEvents, discardExpiredDeadLetters } from '../sql/cleanup-outbox-events.js';
import { deleteProcessedEventReplays, deleteProcessedEvents } from '../sql/cleanup-processed-events.js';
import { deleteOldReplays } from '../sql/replay-events.js';
import {
  type CleanupOptions,
  type ResolvedCleanupOptions,
  resolveCleanupOptions,
} from './cleanup-options.js';

export { type CleanupOptions, resolveCleanupOptions } from './cleanup-options.js';

export interface CleanupDeps {
  /** Runs single statements; a `pg.Pool` (each batch commits on its own). */
  db: Queryable;
  options?: CleanupOptions;
  logger?: OutboxLogger;
  metrics?: OutboxMetrics;
}

export interface CleanupRunOptions {
  /** Milliseconds left in the invocation (Lambda's `context.getRemainingTimeInMillis`). */
  remainingMs: () => number;
  /** Pins "now" for the retention cutoffs (tests); the database clock otherwise. */
  now?: Date;
}

/** What cleanup did to one kind of row. */
export interface CleanupTableReport {
  /** Rows older than this were deleted. */
  cutoff: Date;
  deleted: number;
  /** DELETE statements run (each one bounded by the batch size, each its own transaction). */
  statements: number;
  /** True when no row older than the cutoff is left. */
  finished: boolean;
}

export interface CleanupReport {
  /** Every table done; false when the time budget ran out first. */
  finished: boolean;
  stoppedBecause: 'done' | 'time';
  batchSize: number;
  /** Published outbox rows. */
  outboxEvents: CleanupTableReport;
  /** Consumer dedupe rows. */
  processedEvents: CleanupTableReport;
  /**
   * Dead letters past their retention, discarded (on record in
   * outbox_discarded_events as `cleanup: dead-letter retention`; deleted
   * later with the published rows) unless an unfinished event of their
   * aggregate comes after them; null when they are kept (no retention).
   */
  deadLetters: CleanupTableReport | null;
  /** Idle rows of outbox_aggregate_locks, older than the outbox retention. */
  aggregateLocks: CleanupTableReport;
  /** Replay dedupe rows of consumers with `replays: 'handle'` (processed_events' retention). */
  processedEventReplays: CleanupTableReport;
  /** Replay audit rows (`outbox_replays`) with no event still waiting; null when they are kept. */
  replays: CleanupTableReport | null;
  durationMs: number;
}

type DeleteBatch = (db: Queryable, cutoff: Date, limit: number, schema?: string) => Promise<number>;

/**
 * Deletes what retention no longer needs: published outbox rows, consumer
 * dedupe rows, (only when a retention is configured) dead letters (discarded,
 * audited, rather than deleted), and
 * aggregate lock rows created before the outbox retention and not held by a
 * producer right now (enqueueEvents re-creates them when needed), each in
 * bounded batches of short transactions, oldest first, one batch of each
 * table in turn. Pending rows are never touched, nor is a dead letter with
 * an unfinished event behind it in its aggregate (in ordered mode with the
 * `block` policy it holds that aggregate back until an operator redrives or
 * discards it). Before each batch it checks the time left and stops,
 * unfinished, once it falls under the safety margin; the next run continues
 * where this one stopped.
 *
 * @example
 * const report = await runCleanup(
 *   { db: pool, options: { outboxRetentionDays: 7 } },
 *   { remainingMs: () => context.getRemainingTimeInMillis() },
 * );
 * // → { finished: true, outboxEvents: { deleted: 80000, statements: 17, ... }, ... }
 */
export async function runCleanup(deps: CleanupDeps, run: CleanupRunOptions): Promise<CleanupReport> {
  const options: ResolvedCleanupOptions = resolveCleanupOptions(deps.options);
  // A missing table or column: an OutboxSchemaError naming the schema looked in.
  return withSchemaErrors(options.schema, () => cleanup(deps, run, options));
}

async function cleanup(
  deps: CleanupDeps,
  run: CleanupRunOptions,
  options: ResolvedCleanupOptions,
): Promise<CleanupReport> {
  const started = performance.now();
  const logger = deps.logger ?? silentLogger;
  const metrics = deps.metrics ?? noMetrics;
  const cutoffs = await cleanupCutoffs(
    deps.db,
    {
      outboxEventsDays: options.outboxRetentionDays,
      processedEventsDays: options.processedEventsRetentionDays,
      deadLettersDays: options.deadLetterRetentionDays,
      replaysDays: options.replayRetentionDays,
    },
    run.now,
  );
  const table = (cutoff: Date): CleanupTableReport => ({
    cutoff,
    deleted: 0,
    statements: 0,
    finished: false,
  });
  const report: CleanupReport = {
    finished: false,
    stoppedBecause: 'done',
    batchSize: options.batchSize,
    outboxEvents: table(cutoffs.outboxEvents),
    processedEvents: table(cutoffs.processedEvents),
    deadLetters: cutoffs.deadLetters ? table(cutoffs.deadLetters) : null,
    aggregateLocks: table(cutoffs.outboxEvents),
    processedEventReplays: table(cutoffs.processedEvents),
    replays: cutoffs.replays ? table(cutoffs.replays) : null,
    durationMs: 0,
  };
  const tasks: Array<[string, CleanupTableReport | null, DeleteBatch]> = [
    ['outbox_events', report.outboxEvents, deleteProcessedOutboxEvents],
    ['processed_events', report.processedEvents, deleteProcessedEvents],
    ['dead letters', report.deadLetters, discardExpiredDeadLetters],
    ['outbox_aggregate_locks', report.aggregateLocks, deleteIdleAggregateLocks],
    ['processed_event_replays', report.processedEventReplays, deleteProcessedEventReplays],
    ['outbox_replays', report.replays, deleteOldReplays],
  ];

  // Round robin: one batch of each unfinished table per round, so a table
  // with more rows than a run can delete (outbox_events under a low rate
  // limit) never starves the ones after it; each gets its share of every run.
  const timeLeft = () => run.remainingMs() - options.safetyMarginMs > 0;
  let open = tasks.filter(([, task]) => task !== null) as Array<[string, CleanupTableReport, DeleteBatch]>;
  rounds: while (open.length > 0) {
    for (const [name, task, deleteBatch] of open) {
      if (!timeLeft()) {
        report.stoppedBecause = 'time';
        break rounds;
      }
      const batchStarted = performance.now();
      const deleted = await deleteBatch(deps.db, task.cutoff, options.batchSize, options.schema);
      task.statements++;
      task.deleted += deleted;
      // A short batch means nothing older than the cutoff is left (or what is
      // left is locked by an overlapping cleanup, which will delete it).
      task.finished = deleted < options.batchSize;
      logger.debug('cleanup batch', { table: name, deleted, statement: task.statements });
      if (!(await paceBatch(options.maxRowsPerSecond, deleted, batchStarted, run, options.safetyMarginMs))) {
        // Its pace was cut short at the margin: another batch now would go
        // past the rate limit.
        report.stoppedBecause = 'time';
        break rounds;
      }
    }
    open = open.filter(([, task]) => !task.finished);
  }

  report.finished = report.stoppedBecause === 'done';
  report.durationMs = performance.now() - started;
  metrics.record('OutboxEventsDeleted', 'Count', report.outboxEvents.deleted);
  metrics.record('ProcessedEventsDeleted', 'Count', report.processedEvents.deleted);
  metrics.record('DeadLettersDeleted', 'Count', report.deadLetters?.deleted ?? 0);
  metrics.record('AggregateLocksDeleted', 'Count', report.aggregateLocks.deleted);
  metrics.record('ReplaysDeleted', 'Count', report.replays?.deleted ?? 0);
  metrics.record('CleanupUnfinished', 'Count', report.finished ? 0 : 1);
  metrics.record('CleanupDurationMs', 'Milliseconds', report.durationMs);
  const counts = {
    outbox_events_deleted: report.outboxEvents.deleted,
    processed_events_deleted: report.processedEvents.deleted,
    dead_letters_deleted: report.deadLetters?.deleted ?? 'kept',
    aggregate_locks_deleted: report.aggregateLocks.deleted,
    processed_event_replays_deleted: report.processedEventReplays.deleted,
    replays_deleted: report.replays?.deleted ?? 'kept',
    statements:
      report.outboxEvents.statements +
      report.processedEvents.statements +
      (report.deadLetters?.statements ?? 0) +
      report.aggregateLocks.statements +
      report.processedEventReplays.statements +
      (report.replays?.statements ?? 0),
    finished: report.finished,
    duration_ms: Math.round(report.durationMs),
  };
  if (report.finished) logger.info('cleanup finished', counts);
  else logger.warn('cleanup stopped early: time budget nearly spent; the next run continues', counts);
  return report;
}

/**
 * With a rate limit, makes a batch of `deleted` rows last at least
 * `deleted / maxRowsPerSecond` seconds, so no stretch of a run goes faster
 * than the limit (there is no catching up after a slow one). Never waits
 * past the point where the safety margin begins: false when the wait was
 * cut short there, and the loop then stops, unfinished (the next run
 * continues), so only that last batch can outrun the limit.
 */
async function paceBatch(
  maxRowsPerSecond: number | null,
  deleted: number,
  batchStarted: number,
  run: CleanupRunOptions,
  safetyMarginMs: number,
): Promise<boolean> {
  if (maxRowsPerSecond === null || deleted === 0) return true;
  const paceMs = (deleted / maxRowsPerSecond) * 1000 - (performance.now() - batchStarted);
  const leftMs = run.remainingMs() - safetyMarginMs;
  const waitMs = Math.min(paceMs, leftMs);
  if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
  return paceMs <= leftMs;
}
