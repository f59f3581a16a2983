import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';
import type { SelectedEvent } from './replay-events.js';

/** Which dead letters an operator asked for; every field narrows, absent fields do not. */
export interface DeadLetterFilter {
  ids?: readonly string[] | undefined;
  eventType?: string | undefined;
  aggregateType?: string | undefined;
  aggregateId?: string | undefined;
  /** Inclusive lower bound on `dead_lettered_at`. */
  deadLetteredAfter?: Date | undefined;
  /** Exclusive upper bound on `dead_lettered_at`. */
  deadLetteredBefore?: Date | undefined;
}

// Why it is shaped this way:
// - One fixed statement text for any combination of filters: an absent filter
//   is a NULL parameter and `$n IS NULL OR ...` drops out. node-postgres sends
//   unnamed statements, which PostgreSQL plans with the actual values, so the
//   NULL branches fold away and the planner sees only the real conditions.
// - `dead_lettered_at IS NOT NULL` comes first and matches the partial index
//   outbox_events_dead_lettered_at, so a redrive never walks processed history.
// - The window is half-open [after, before): two adjacent windows never both
//   match a row.
const WHERE = `
  dead_lettered_at IS NOT NULL
  AND ($1::uuid[] IS NULL OR id = ANY($1::uuid[]))
  AND ($2::text IS NULL OR event_type = $2::text)
  AND ($3::text IS NULL OR aggregate_type = $3::text)
  AND ($4::text IS NULL OR aggregate_id = $4::text)
  AND ($5::timestamptz IS NULL OR dead_lettered_at >= $5::timestamptz)
  AND ($6::timestamptz IS NULL OR dead_lettered_at < $6::timestamptz)`;

function filterValues(filter: DeadLetterFilter): unknown[] {
  return [
    filter.ids && filter.ids.length > 0 ? filter.ids : null,
    filter.eventType ?? null,
    filter.aggregateType ?? null,
    filter.aggregateId ?? null,
    filter.deadLetteredAfter ?? null,
    filter.deadLetteredBefore ?? null,
  ];
}

const COUNT = (t: OutboxTables) => `SELECT count(*)::int AS n FROM ${t.events} WHERE ${WHERE}`;

// Oldest first (seq order), so repeated redrives with a limit work through the
// dead letters in the order the events were written, and an aggregate's
// earlier event is never left behind while a later one is retried.
// FOR UPDATE (not SKIP LOCKED): a concurrent redrive of the same rows waits
// for ours, then re-checks `dead_lettered_at IS NOT NULL` on the new row
// version and drops the rows we already reset, so no row is reset twice.
const SELECT_FOR_UPDATE = (t: OutboxTables) => `
SELECT id, aggregate_type, aggregate_id FROM ${t.events} WHERE ${WHERE}
ORDER BY seq
LIMIT $7
FOR UPDATE`;

// The dry run takes no row locks: it must not block anyone.
const SELECT = (t: OutboxTables) => `
SELECT id, aggregate_type, aggregate_id FROM ${t.events} WHERE ${WHERE}
ORDER BY seq
LIMIT $7`;

// Back to pending, as if never tried: the claim's partial index picks the row
// up again. Kept on purpose:
// - delivered_targets, so targets that already accepted the event are not
//   sent it again;
// - last_error, as the record of why it was dead-lettered (the relay
//   overwrites it if the retry fails too; redrive_count and redriven_at say
//   that it was redriven).
// `dead_lettered_at IS NOT NULL` again, so the statement is safe on its own
// (it only ever resets dead letters) even without the preceding lock.
const RESET = (t: OutboxTables) => `
UPDATE ${t.events}
SET attempts = 0,
    retry_after = NULL,
    locked_until = NULL,
    locked_by = NULL,
    dead_lettered_at = NULL,
    failing_since = NULL,
    claimed_alone = false,
    redrive_count = redrive_count + 1,
    redriven_at = now()
WHERE id = ANY($1::uuid[])
  AND dead_lettered_at IS NOT NULL
RETURNING id`;

// Finished without being published, by an operator's decision. processed_at
// is set so that the row counts as finished everywhere (claim, stats,
// retention) and dead_lettered_at is cleared (the two are never both set), so
// it leaves the dead-letter view and no longer holds its aggregate in ordered
// mode. discarded_at / discarded_by record that it was never sent and who
// decided; last_error keeps why it had been dead-lettered.
/** The columns of a discard; `by` is the parameter naming who decided. Shared with cleanup's retention. */
export const discardSet = (by: string) => `
SET processed_at = now(),
    discarded_at = now(),
    discarded_by = ${by}::text,
    dead_lettered_at = NULL,
    retry_after = NULL,
    locked_until = NULL,
    locked_by = NULL`;

// A claim may have parked the rows behind a dead letter (claim-ordered.ts,
// "Parking": retry_after = parked_until, a minute at most): a discard lets
// its aggregate go at once, so it lifts those parks in the same statement.
// It also rewrites the aggregate's next event (its head from now on), as
// redrive and replay do (busyAggregates, replay-events.ts): a claim whose
// snapshot still saw the dead letter re-checks that row before parking it,
// finds it rewritten and leaves it alone.
const DISCARD = (t: OutboxTables) => `
WITH discarded AS (
  UPDATE ${t.events}${discardSet('$2')}
  WHERE id = ANY($1::uuid[])
    AND dead_lettered_at IS NOT NULL
  RETURNING id, aggregate_type, aggregate_id),
unparked AS (
  UPDATE ${t.events} e
  SET retry_after = CASE WHEN e.retry_after = e.parked_until THEN NULL ELSE e.retry_after END,
      parked_until = NULL
  FROM (SELECT DISTINCT aggregate_type, aggregate_id FROM discarded) d
  WHERE e.aggregate_type = d.aggregate_type AND e.aggregate_id = d.aggregate_id
    AND e.processed_at IS NULL AND e.dead_lettered_at IS NULL
    AND (e.parked_until IS NOT NULL
      OR e.seq = (SELECT min(h.seq) FROM ${t.events} h
                  WHERE num_nulls(h.processed_at, h.dead_lettered_at) = 2
                    AND h.aggregate_type = d.aggregate_type AND h.aggregate_id = d.aggregate_id)))
SELECT id FROM discarded`;

/** Counts every dead letter matching `filter` (no limit). */
export async function countDeadLetters(
  db: Queryable,
  filter: DeadLetterFilter,
  schema?: string,
): Promise<number> {
  const { rows } = await db.query<{ n: number }>(COUNT(outboxTables(schema)), filterValues(filter));
  return rows[0]?.n ?? 0;
}

/**
 * The first `limit` dead letters (by seq) matching `filter`, with their
 * aggregates. With `lock`, the rows stay locked until the caller's
 * transaction ends.
 */
export async function selectDeadLetters(
  db: Queryable,
  filter: DeadLetterFilter,
  limit: number,
  options: { lock: boolean; schema?: string | undefined },
): Promise<SelectedEvent[]> {
  const sql = (options.lock ? SELECT_FOR_UPDATE : SELECT)(outboxTables(options.schema));
  const { rows } = await db.query<{ id: string; aggregate_type: string; aggregate_id: string }>(sql, [
    ...filterValues(filter),
    limit,
  ]);
  return rows.map((r) => ({ id: r.id, aggregateType: r.aggregate_type, aggregateId: r.aggregate_id }));
}

/** Resets the given dead letters to pending; returns the ids it reset. */
export async function resetDeadLetters(
  db: Queryable,
  ids: readonly string[],
  schema?: string,
): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const { rows } = await db.query<{ id: string }>(RESET(outboxTables(schema)), [ids]);
  return new Set(rows.map((r) => r.id));
}

/** Finishes the given dead letters without publishing them; returns the ids it discarded. */
export async function discardDeadLetters(
  db: Queryable,
  ids: readonly string[],
  discardedBy: string | null,
  schema?: string,
): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const { rows } = await db.query<{ id: string }>(DISCARD(outboxTables(schema)), [ids, discardedBy]);
  return new Set(rows.map((r) => r.id));
}
