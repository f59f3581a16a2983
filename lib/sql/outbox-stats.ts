import type { Queryable } from './claim-batch.js';

export interface OutboxStats {
  /** Unfinished events (not published, not dead-lettered). */
  pending: number;
  /** Of those, held under a live lease right now. */
  leased: number;
  /** Of those, waiting for their backoff to pass. */
  backingOff: number;
  deadLetters: number;
  /** Age of the oldest unfinished event, in seconds (0 when none). */
  oldestPendingAgeSeconds: number;
}

// Pending figures come from the partial index's rows only; the dead-letter
// count uses its own partial index. Neither scans processed history.
const STATS = `
SELECT
  count(*)::int AS pending,
  count(*) FILTER (WHERE locked_until >= now())::int AS leased,
  count(*) FILTER (WHERE retry_after > now())::int AS backing_off,
  coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest,
  (SELECT count(*) FROM outbox_events WHERE dead_lettered_at IS NOT NULL)::int AS dead
FROM outbox_events
WHERE processed_at IS NULL AND dead_lettered_at IS NULL`;

export async function outboxStats(db: Queryable): Promise<OutboxStats> {
  const { rows } = await db.query(STATS);
  const r = rows[0];
  return {
    pending: r.pending,
    leased: r.leased,
    backingOff: r.backing_off,
    deadLetters: r.dead,
    oldestPendingAgeSeconds: r.oldest,
  };
}
