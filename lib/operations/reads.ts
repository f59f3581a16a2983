import type { Queryable } from '../db/queryable.js';
import { resolveSchema, withSchemaErrors } from '../db/schema.js';
import {
  type DeadLetterPage,
  type ListDeadLettersOptions,
  listDeadLetters as listDeadLettersIn,
} from '../sql/list-dead-letters.js';
import { type OutboxStats, outboxStats as outboxStatsIn } from '../sql/outbox-stats.js';
import { listReplays as listReplaysIn, type ReplayRecord } from '../sql/replay-events.js';

// The operators' reads, as the operations entry point exports them: the
// schema defaults to OUTBOX_SCHEMA, and a missing outbox table or column is
// an OutboxSchemaError naming the schema looked in.

/**
 * The first `limit` dead letters (oldest first), optionally of one event
 * type, and how many there are, counted up to `countCap`. `schema`:
 * default `OUTBOX_SCHEMA`, else the connection's `search_path`.
 *
 * @example
 * const page = await listDeadLetters(pool, { limit: 50 });
 * console.log(`${page.total}${page.totalCapped ? '+' : ''} dead letters`);
 */
export function listDeadLetters(db: Queryable, options: ListDeadLettersOptions): Promise<DeadLetterPage> {
  const schema = resolveSchema(options.schema);
  return withSchemaErrors(schema, () => listDeadLettersIn(db, { ...options, schema }));
}

/** The outbox's state: pending, leased, backing off, dead letters, blocked aggregates, oldest pending age. */
export function outboxStats(
  db: Queryable,
  options: { schema?: string | undefined } = {},
): Promise<OutboxStats> {
  const schema = resolveSchema(options.schema);
  return withSchemaErrors(schema, () => outboxStatsIn(db, { schema }));
}

/** The most recent replays, newest first, with how many of their events still wait to go out. */
export function listReplays(
  db: Queryable,
  options: { limit?: number | undefined; schema?: string | undefined } = {},
): Promise<ReplayRecord[]> {
  const schema = resolveSchema(options.schema);
  return withSchemaErrors(schema, () => listReplaysIn(db, { ...options, schema }));
}
