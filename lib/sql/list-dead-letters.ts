import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';

/** One dead letter as an operator sees it: what it is and why it failed. */
export interface DeadLetter {
  id: string;
  seq: string;
  eventType: string;
  aggregateType: string;
  aggregateId: string;
  attempts: number;
  lastError: string | null;
  createdAt: Date;
  deadLetteredAt: Date;
  redriveCount: number;
  redrivenAt: Date | null;
}

export interface DeadLetterPage {
  /** Dead letters matching the filter, listed or not. */
  total: number;
  rows: DeadLetter[];
}

// Reads the outbox_dead_letters view (payloads stay out of operator output).
// Listed in seq order, the order a redrive resets them in, so the first page
// is exactly what `redrive --all --limit n` would reset. `count(*) OVER ()`
// is computed before LIMIT: the total comes with the page in one statement.
const LIST = (t: OutboxTables) => `
SELECT id, seq, event_type, aggregate_type, aggregate_id, attempts, last_error,
       created_at, dead_lettered_at, redrive_count, redriven_at,
       count(*) OVER ()::int AS total
FROM ${t.deadLettersView}
WHERE ($1::text IS NULL OR event_type = $1::text)
ORDER BY seq
LIMIT $2`;

interface Row {
  id: string;
  seq: string;
  event_type: string;
  aggregate_type: string;
  aggregate_id: string;
  attempts: number;
  last_error: string | null;
  created_at: Date;
  dead_lettered_at: Date;
  redrive_count: number;
  redriven_at: Date | null;
  total: number;
}

/** The first `limit` dead letters (oldest first), optionally of one event type, and how many there are. */
export async function listDeadLetters(
  db: Queryable,
  options: { limit: number; eventType?: string | undefined; schema?: string | undefined },
): Promise<DeadLetterPage> {
  const { rows } = await db.query<Row>(LIST(outboxTables(options.schema)), [
    options.eventType ?? null,
    options.limit,
  ]);
  return {
    total: rows[0]?.total ?? 0,
    rows: rows.map((r) => ({
      id: r.id,
      seq: r.seq,
      eventType: r.event_type,
      aggregateType: r.aggregate_type,
      aggregateId: r.aggregate_id,
      attempts: r.attempts,
      lastError: r.last_error,
      createdAt: r.created_at,
      deadLetteredAt: r.dead_lettered_at,
      redriveCount: r.redrive_count,
      redrivenAt: r.redriven_at,
    })),
  };
}
