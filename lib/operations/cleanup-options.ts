import { resolveSchema } from '../db/schema.js';
import { ConfigError } from '../errors.js';

/** Cleanup settings as a caller gives them; every field has a default. */
export interface CleanupOptions {
  /** Days a published outbox row is kept. Default 7. */
  outboxRetentionDays?: number;
  /**
   * Days a consumer dedupe row is kept. Default 30: longer than SQS can hold
   * a message (14 days), so a late redelivery is still recognised.
   */
  processedEventsRetentionDays?: number;
  /** Days a dead letter is kept; `null` (the default) keeps dead letters until redriven. */
  deadLetterRetentionDays?: number | null;
  /**
   * Days a replay's audit row (`outbox_replays`) is kept. Default 365; `null`
   * keeps them. A replay with an event still waiting to be republished is
   * never deleted.
   */
  replayRetentionDays?: number | null;
  /** Rows per DELETE statement. Default 5,000. */
  batchSize?: number;
  /** Stop starting batches when less than this much invocation time is left. Default 10 s. */
  safetyMarginMs?: number;
  /**
   * At most this many rows deleted per second, over all tables: each batch
   * is made to last at least its rows ÷ this, so cleanup leaves the
   * database's CPU and disk to the business workload and the relay. `null`
   * (the default): as fast as the database goes.
   */
  maxRowsPerSecond?: number | null;
  /**
   * The schema of the outbox tables (`migrate({ schema })`). Default: the
   * `OUTBOX_SCHEMA` environment variable, else unqualified names (`search_path`).
   */
  schema?: string | undefined;
}

export type ResolvedCleanupOptions = Required<Omit<CleanupOptions, 'schema'>> & {
  schema: string | undefined;
};

export const CLEANUP_DEFAULTS: ResolvedCleanupOptions = {
  outboxRetentionDays: 7,
  processedEventsRetentionDays: 30,
  deadLetterRetentionDays: null,
  replayRetentionDays: 365,
  batchSize: 5_000,
  safetyMarginMs: 10_000,
  maxRowsPerSecond: null,
  schema: undefined,
};

/** Fills in defaults; the one place where they are decided. */
export function resolveCleanupOptions(options: CleanupOptions = {}): ResolvedCleanupOptions {
  const defined = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
  const resolved: ResolvedCleanupOptions = { ...CLEANUP_DEFAULTS, ...defined };
  const rate = resolved.maxRowsPerSecond;
  if (rate !== null && !(Number.isFinite(rate) && rate > 0)) {
    throw new ConfigError('maxRowsPerSecond', `expected a number of rows > 0, or null (got ${rate})`);
  }
  resolved.schema = resolveSchema(resolved.schema);
  return resolved;
}
