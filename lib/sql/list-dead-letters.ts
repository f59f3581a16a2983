import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';
import { ValidationError } from '../errors.js';

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

/** Dead letters are counted up to this many; beyond it the count says "10,000+". */
export const DEAD_LETTER_COUNT_CAP = 10_000;

export interface DeadLetterPage {
  /** Dead letters matching the filter, listed or not, counted up to `countCap`. */
  total: number;
  /** True when more than `countCap` match: `total` is then the cap, not the count. */
  totalCapped: boolean;
  rows: DeadLetter[];
}

export interface ListDeadLettersOptions {
  limit: number;
  eventType?: string | undefined;
  schema?: string | undefined;
  /** Count matches up to this many (default {@link DEAD_LETTER_COUNT_CAP}). */
  countCap?: number | undefined;
}

// Reads the outbox_dead_letters view (payloads stay out of operator output).
// Listed in seq order, the order a redrive resets them in, so the first page
// is exactly what `redrive --all --limit n` would reset. The count reads at
// most cap + 1 rows: millions of dead letters cost no longer scan than
// ten thousand. One statement, so page and count see the same rows; with no
// match the LEFT JOIN still returns the count's row (its columns null).
const LIST = (t: OutboxTables) => `
SELECT p.*, c.n AS total
FROM (SELECT count(*)::int AS n
      FROM (SELECT 1 FROM ${t.deadLettersView}
            WHERE ($1::text IS NULL OR event_type = $1::text)
            LIMIT $3) m) c
LEFT JOIN LATERAL (
  SELECT id, seq, event_type, aggregate_type, aggregate_id, attempts, last_error,
         created_at, dead_lettered_at, redrive_count, redriven_at
  FROM ${t.deadLettersView}
  WHERE ($1::text IS NULL OR event_type = $1::text)
  ORDER BY seq
  LIMIT $2) p ON true
ORDER BY p.seq`;

interface Row {
  id: string | null;
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

/**
 * The first `limit` dead letters (oldest first), optionally of one event
 * type, and how many there are, counted up to `countCap`.
 *
 * @example
 * const page = await listDeadLetters(pool, { limit: 50 });
 * console.log(`${page.total}${page.totalCapped ? '+' : ''} dead letters`);
 */
export async function listDeadLetters(
  db: Queryable,
  options: ListDeadLettersOptions,
): Promise<DeadLetterPage> {
  const cap = options.countCap ?? DEAD_LETTER_COUNT_CAP;
  if (!Number.isSafeInteger(cap) || cap < 1)
    throw new ValidationError('countCap', 'must be a whole number >= 1');
  if (!Number.isSafeInteger(options.limit) || options.limit < 1) {
    throw new ValidationError('limit', 'must be a whole number >= 1');
  }
  const { rows } = await db.query<Row>(LIST(outboxTables(options.schema)), [
    options.eventType ?? null,
    options.limit,
    cap + 1,
  ]);
  const counted = rows[0]?.total ?? 0;
  return {
    total: Math.min(counted, cap),
    totalCapped: counted > cap,
    rows: rows.filter((r) => r.id !== null).map(deadLetterOf),
  };
}

/** A row of the outbox_dead_letters view as {@link DeadLetter}. */
export function deadLetterOf(r: Omit<Row, 'total'>): DeadLetter {
  return {
    id: r.id as string,
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
  };
}
