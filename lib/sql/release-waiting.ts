import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';

// Why it is shaped this way:
// - Runs once per recovery of a target, not per batch. After a long outage
//   every event of the backlog waits for that target, so one UPDATE of all of
//   them would hold that many row locks, write that much WAL in one
//   transaction and run as long as the backlog is big, while the relays claim
//   from the same rows. So it goes in batches, each its own statement
//   (committed on its own when `db` is a pool), at most `$3` rows each.
// - Each batch walks outbox_events_claimable (seq, unfinished rows only) from
//   where the previous one stopped (`seq > $2`), so the backlog is read once
//   over all batches, not once per batch. `cursor` is the last seq the batch
//   looked at, whether or not its row was released; fewer candidates than
//   the limit means the walk reached the end.
// - Only rows backing off and not leased: a leased row's outcome belongs to
//   its lease holder. The conditions (WAITING) are repeated on the UPDATE: a row a
//   relay is recording an outcome for is waited for, then checked again on
//   its new version (leased, or no longer waiting: left alone).
// - The UPDATE finds the candidates by primary key (id = ANY(array)): joined
//   to the CTE instead, a table without statistics gets a nested loop over
//   every waiting row per candidate (2 s for a batch of 1,000 of 12,000).
// - retry_after = NULL makes the row claimable now; its attempts are untouched.
const WAITING = (e: string) => `${e}.processed_at IS NULL AND ${e}.dead_lettered_at IS NULL
    AND $1 = ANY (${e}.waiting_for) AND ${e}.retry_after > now()
    AND (${e}.locked_until IS NULL OR ${e}.locked_until < now())`;
const RELEASE_BATCH = (t: OutboxTables) => `
WITH candidates AS (
  SELECT c.id, c.seq FROM ${t.events} c
  WHERE ${WAITING('c')} AND c.seq > $2::bigint
  ORDER BY c.seq
  LIMIT $3),
released AS (
  UPDATE ${t.events} e
  SET retry_after = NULL, waiting_for = NULL
  WHERE e.id = ANY (ARRAY(SELECT c.id FROM candidates c)) AND ${WAITING('e')}
  RETURNING 1)
SELECT (SELECT count(*) FROM released)::int AS released,
       (SELECT count(*) FROM candidates)::int AS candidates,
       (SELECT max(seq) FROM candidates)::text AS cursor`;

export interface ReleaseWaitingOptions {
  /** Most rows released per statement. Default 1,000. */
  batchSize?: number;
  /**
   * No batch starts after this (`performance.now()` time): the caller's time
   * is up (the invocation must record its outcomes and return). The rows not
   * released wait out their hold instead.
   */
  until?: number;
}

/**
 * Makes the events waiting for `target` claimable at once, in batches of
 * bounded statements in seq order; returns how many in all.
 */
export async function releaseWaiting(
  db: Queryable,
  target: string,
  schema?: string,
  options: ReleaseWaitingOptions = {},
): Promise<number> {
  const limit = options.batchSize ?? 1_000;
  const sql = RELEASE_BATCH(outboxTables(schema));
  let cursor = '0';
  let total = 0;
  for (;;) {
    if (options.until !== undefined && performance.now() >= options.until) return total;
    const { rows } = await db.query<{ released: number; candidates: number; cursor: string | null }>(sql, [
      target,
      cursor,
      limit,
    ]);
    const batch = rows[0]!;
    total += batch.released;
    if (batch.candidates < limit || batch.cursor === null) return total;
    cursor = batch.cursor;
  }
}
