import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';
import { discardSet } from './redrive-dead-letters.js';

// Why they are shaped this way:
// - One bounded statement per call, committed on its own: each batch holds
//   its row locks and WAL for a moment only, replicas and vacuum keep up, and
//   a run can stop between any two batches.
// - The inner SELECT walks a partial index (outbox_events_processed_at or
//   outbox_events_dead_lettered_at) oldest first and stops after LIMIT rows;
//   the DELETE then finds each row by primary key.
// - SKIP LOCKED: two overlapping cleanups split the work instead of queueing,
//   and a dead letter locked by a redrive in progress is left alone (once the
//   redrive commits it is no dead letter any more).
// - A dead letter with an unfinished event of its aggregate after it is
//   kept, whatever its age: in ordered mode with the `block` policy it is what
//   holds those events back, and deleting it would release them without an
//   operator's decision (a discard does that, audited). One probe of
//   outbox_events_aggregate_heads per dead letter; the partial index on
//   dead_lettered_at gives the candidates oldest first.
// - processed_at and dead_lettered_at are never both set (the relay sets one
//   or the other), so deleting by processed_at cannot touch a dead letter, and
//   pending rows (both NULL) never match either statement.
const DELETE_PROCESSED = (t: OutboxTables) => `
DELETE FROM ${t.events}
WHERE id IN (
  SELECT id FROM ${t.events}
  WHERE processed_at < $1::timestamptz
  ORDER BY processed_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED)`;

// Dead letters past their retention are not deleted but discarded, as an
// operator's discard would (processed_at, discarded_at, discarded_by): the
// decision is on record (outbox_discarded_events, `discarded_by` names the
// retention), the event leaves the dead letters and no longer holds its
// aggregate in ordered mode, and the row goes with the published rows after
// the outbox retention. One whose aggregate has an unfinished event after it
// is kept (above): that is an operator's decision to make.
const DISCARD_EXPIRED_DEAD_LETTERS = (t: OutboxTables) => `
UPDATE ${t.events}${discardSet('$3')}
WHERE id IN (
  SELECT d.id FROM ${t.events} d
  WHERE dead_lettered_at < $1::timestamptz
    AND NOT EXISTS (
      SELECT 1 FROM ${t.events} u
      WHERE num_nulls(u.processed_at, u.dead_lettered_at) = 2
        AND u.aggregate_type = d.aggregate_type
        AND u.aggregate_id = d.aggregate_id
        AND u.seq > d.seq)
  ORDER BY dead_lettered_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED)
  AND dead_lettered_at IS NOT NULL`;

/** Who discarded a dead letter that its retention expired. */
export const RETENTION_DISCARDER = 'cleanup: dead-letter retention';

/** Deletes at most `limit` outbox rows published before `cutoff`; returns how many. */
export async function deleteProcessedOutboxEvents(
  db: Queryable,
  cutoff: Date,
  limit: number,
  schema?: string,
): Promise<number> {
  const result = await db.query(DELETE_PROCESSED(outboxTables(schema)), [cutoff, limit]);
  return result.rowCount ?? 0;
}

/**
 * Discards (audited, see above) at most `limit` dead letters dead-lettered
 * before `cutoff` with nothing unfinished behind them; returns how many.
 */
export async function discardExpiredDeadLetters(
  db: Queryable,
  cutoff: Date,
  limit: number,
  schema?: string,
): Promise<number> {
  const result = await db.query(DISCARD_EXPIRED_DEAD_LETTERS(outboxTables(schema)), [
    cutoff,
    limit,
    RETENTION_DISCARDER,
  ]);
  return result.rowCount ?? 0;
}
