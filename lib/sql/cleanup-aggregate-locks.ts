import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';

// Rows of outbox_aggregate_locks carry no state: enqueueEvents inserts one
// per aggregate the first time it sees it and from then on only locks it, so
// the table grows with the number of aggregates ever written. A row older
// than the outbox retention is pruned; if its aggregate is still written to,
// the next producer simply inserts it again (once per retention period).
// Why it is shaped this way:
// - SKIP LOCKED: a row locked by a producer's open transaction is in use and
//   is left alone. A producer that arrives while cleanup holds a row waits
//   for it; once the delete commits, its INSERT ... ON CONFLICT finds no
//   conflict any more and inserts a fresh row, so serialization holds.
// - Bounded and oldest first through outbox_aggregate_locks_created_at, one
//   short transaction per batch, like the other cleanup statements.
const DELETE_IDLE_LOCKS = (t: OutboxTables) => `
DELETE FROM ${t.aggregateLocks}
WHERE (aggregate_type, aggregate_id) IN (
  SELECT aggregate_type, aggregate_id FROM ${t.aggregateLocks}
  WHERE created_at < $1::timestamptz
  ORDER BY created_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED)`;

/** Deletes at most `limit` aggregate lock rows created before `cutoff` and not in use; returns how many. */
export async function deleteIdleAggregateLocks(
  db: Queryable,
  cutoff: Date,
  limit: number,
  schema?: string,
): Promise<number> {
  const result = await db.query(DELETE_IDLE_LOCKS(outboxTables(schema)), [cutoff, limit]);
  return result.rowCount ?? 0;
}
