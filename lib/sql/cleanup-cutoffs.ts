import type { Queryable } from '../db/queryable.js';

export interface CleanupCutoffs {
  /** Processed outbox rows older than this go. */
  outboxEvents: Date;
  /** Dedupe rows older than this go. */
  processedEvents: Date;
  /** Dead letters older than this go; null keeps them all. */
  deadLetters: Date | null;
  /** Replay audit rows older than this go (unless an event of theirs still waits); null keeps them. */
  replays: Date | null;
}

// Computed once per run from the database clock (the relay's leases and
// backoff use it too, so every process agrees on "now" whatever its own clock
// says). Fixing the cutoffs up front means every batch of a run deletes up to
// the same instant and the run converges instead of chasing a moving cutoff.
// `$1` replaces now() when a caller (a test) pins the time. A day is 24 hours
// here, not a calendar day: a calendar day follows the session's TimeZone
// across DST changes, and the cutoff must not depend on the connection's
// settings. A NULL retention multiplies out to a NULL cutoff.
const CUTOFFS = `
SELECT t.now - $2::int * interval '24 hours' AS outbox_events,
       t.now - $3::int * interval '24 hours' AS processed_events,
       t.now - $4::int * interval '24 hours' AS dead_letters,
       t.now - $5::int * interval '24 hours' AS replays
FROM (SELECT coalesce($1::timestamptz, now()) AS now) t`;

/** Retention in whole days → cutoff instants; a null retention gives a null cutoff (keep). */
export async function cleanupCutoffs(
  db: Queryable,
  retention: {
    outboxEventsDays: number;
    processedEventsDays: number;
    deadLettersDays: number | null;
    replaysDays?: number | null;
  },
  now?: Date,
): Promise<CleanupCutoffs> {
  const { rows } = await db.query<{
    outbox_events: Date;
    processed_events: Date;
    dead_letters: Date | null;
    replays: Date | null;
  }>(CUTOFFS, [
    now ?? null,
    retention.outboxEventsDays,
    retention.processedEventsDays,
    retention.deadLettersDays,
    retention.replaysDays ?? null,
  ]);
  const row = rows[0]!;
  return {
    outboxEvents: row.outbox_events,
    processedEvents: row.processed_events,
    deadLetters: row.dead_letters,
    replays: row.replays,
  };
}
