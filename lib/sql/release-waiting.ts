import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';

// Why it is shaped this way:
// - Runs once per recovery of a target, not per batch, so walking the pending
//   rows (the claimable partial index keeps that to unfinished rows) is fine.
// - Only rows backing off and not leased: a leased row's outcome belongs to
//   its lease holder.
// - retry_after = NULL makes the row claimable now; its attempts are untouched.
const RELEASE = (t: OutboxTables) => `
UPDATE ${t.events}
SET retry_after = NULL,
    waiting_for = NULL
WHERE processed_at IS NULL
  AND dead_lettered_at IS NULL
  AND $1 = ANY (waiting_for)
  AND retry_after > now()
  AND (locked_until IS NULL OR locked_until < now())`;

/** Makes the events waiting for `target` claimable at once; returns how many. */
export async function releaseWaiting(db: Queryable, target: string, schema?: string): Promise<number> {
  const { rowCount } = await db.query(RELEASE(outboxTables(schema)), [target]);
  return rowCount ?? 0;
}
