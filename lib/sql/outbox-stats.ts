import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';

export interface OutboxStats {
  /** Unfinished events (not published, not dead-lettered). */
  pending: number;
  /** Of those, held under a live lease right now. */
  leased: number;
  /**
   * Of those, waiting for their own backoff to pass. Rows an ordered claim
   * parked behind an earlier event of their aggregate (retry_after =
   * parked_until) are not backing off: they wait for that event.
   */
  backingOff: number;
  deadLetters: number;
  /**
   * Aggregates with a dead letter and unfinished events after it: the
   * aggregates an ordered relay with `deadLetterPolicy: 'block'` holds back
   * until an operator redrives or discards the dead letter.
   */
  blockedAggregates: number;
  /** Age of the oldest unfinished event, in seconds (0 when none); a replay counts from when it was requested. */
  oldestPendingAgeSeconds: number;
}

// Pending figures come from the partial index's rows only; the dead-letter
// count uses its own partial index. Neither scans processed history.
// Blocked aggregates: one row per dead-lettered aggregate (its earliest dead
// letter, from outbox_events_dead_letters_by_aggregate), then one probe of
// outbox_events_aggregate_heads for a later unfinished event. Cost
// follows the number of dead letters, not the backlog behind them.
const STATS = (t: OutboxTables) => `
SELECT
  count(*)::int AS pending,
  count(*) FILTER (WHERE locked_until >= now())::int AS leased,
  count(*) FILTER (WHERE retry_after > now() AND retry_after IS DISTINCT FROM parked_until)::int AS backing_off,
  coalesce(extract(epoch FROM now() - min(coalesce(replayed_at, created_at))), 0)::float8 AS oldest,
  (SELECT count(*) FROM ${t.events} WHERE dead_lettered_at IS NOT NULL)::int AS dead,
  (SELECT count(*)
   FROM (SELECT aggregate_type, aggregate_id, min(seq) AS seq
         FROM ${t.events}
         WHERE dead_lettered_at IS NOT NULL
         GROUP BY aggregate_type, aggregate_id) d
   WHERE EXISTS (
     SELECT 1 FROM ${t.events} p
     WHERE num_nulls(p.processed_at, p.dead_lettered_at) = 2
       AND p.aggregate_type = d.aggregate_type
       AND p.aggregate_id = d.aggregate_id
       AND p.seq > d.seq))::int AS blocked
FROM ${t.events}
WHERE processed_at IS NULL AND dead_lettered_at IS NULL`;

export async function outboxStats(
  db: Queryable,
  options: { schema?: string | undefined } = {},
): Promise<OutboxStats> {
  const { rows } = await db.query(STATS(outboxTables(options.schema)));
  const r = rows[0];
  return {
    pending: r.pending,
    leased: r.leased,
    backingOff: r.backing_off,
    deadLetters: r.dead,
    blockedAggregates: r.blocked,
    oldestPendingAgeSeconds: r.oldest,
  };
}
