import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';

/** Which published events an operator asked to replay; every field narrows, absent fields do not. */
export interface ReplayFilter {
  ids?: readonly string[] | undefined;
  eventType?: string | undefined;
  aggregateType?: string | undefined;
  aggregateId?: string | undefined;
  /** Inclusive lower bound on the first publication (`coalesce(first_processed_at, processed_at)`). */
  publishedAfter?: Date | undefined;
  /** Exclusive upper bound on the first publication. */
  publishedBefore?: Date | undefined;
  /** Inclusive lower bound on `created_at`. */
  createdAfter?: Date | undefined;
  /** Exclusive upper bound on `created_at`. */
  createdBefore?: Date | undefined;
}

// Why it is shaped this way:
// - Published means `processed_at IS NOT NULL AND discarded_at IS NULL`: a
//   discarded event was never sent, and a row waiting for a replay (pending
//   again, processed_at NULL) is not matched a second time.
// - One fixed statement text for any combination of filters, as in
//   redrive-dead-letters.ts: an absent filter is a NULL parameter.
// - "Published between" is the event's first publication: processed_at is the
//   latest one once a replay went out, and the same window must find the same
//   events however often they were replayed. `processed_at >= after` is
//   implied (a later publication is never earlier) and lets the planner use
//   outbox_events_processed_at for the lower bound.
const WHERE = `
  processed_at IS NOT NULL
  AND discarded_at IS NULL
  AND ($1::uuid[] IS NULL OR id = ANY($1::uuid[]))
  AND ($2::text IS NULL OR event_type = $2::text)
  AND ($3::text IS NULL OR aggregate_type = $3::text)
  AND ($4::text IS NULL OR aggregate_id = $4::text)
  AND ($5::timestamptz IS NULL
       OR (processed_at >= $5::timestamptz AND coalesce(first_processed_at, processed_at) >= $5::timestamptz))
  AND ($6::timestamptz IS NULL OR coalesce(first_processed_at, processed_at) < $6::timestamptz)
  AND ($7::timestamptz IS NULL OR created_at >= $7::timestamptz)
  AND ($8::timestamptz IS NULL OR created_at < $8::timestamptz)`;

function filterValues(filter: ReplayFilter): unknown[] {
  return [
    filter.ids && filter.ids.length > 0 ? filter.ids : null,
    filter.eventType ?? null,
    filter.aggregateType ?? null,
    filter.aggregateId ?? null,
    filter.publishedAfter ?? null,
    filter.publishedBefore ?? null,
    filter.createdAfter ?? null,
    filter.createdBefore ?? null,
  ];
}

const COUNT = (t: OutboxTables) => `SELECT count(*)::int AS n FROM ${t.events} WHERE ${WHERE}`;

// Oldest first (seq), like a redrive. FOR UPDATE: a concurrent replay of the
// same rows waits for ours, then re-checks `processed_at IS NOT NULL` on the
// new row version and drops the rows we reset, so no row is taken twice.
// The dry run takes no locks.
const SELECT = (t: OutboxTables) => `
SELECT id, aggregate_type, aggregate_id FROM ${t.events} WHERE ${WHERE}
ORDER BY seq
LIMIT $9`;

export interface SelectedEvent {
  id: string;
  aggregateType: string;
  aggregateId: string;
}

/** Counts every published event matching `filter` (no limit). */
export async function countReplayable(db: Queryable, filter: ReplayFilter, schema?: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(COUNT(outboxTables(schema)), filterValues(filter));
  return rows[0]?.n ?? 0;
}

/** The first `limit` published events (by seq) matching `filter`; with `lock`, locked until the transaction ends. */
export async function selectReplayable(
  db: Queryable,
  filter: ReplayFilter,
  limit: number,
  options: { lock: boolean; schema?: string | undefined },
): Promise<SelectedEvent[]> {
  const select = SELECT(outboxTables(options.schema));
  const { rows } = await db.query<{ id: string; aggregate_type: string; aggregate_id: string }>(
    options.lock ? `${select}\nFOR UPDATE` : select,
    [...filterValues(filter), limit],
  );
  return rows.map((r) => ({ id: r.id, aggregateType: r.aggregate_type, aggregateId: r.aggregate_id }));
}

// Ordered mode publishes an aggregate's events in seq order, one relay per
// aggregate at a time. A replayed event keeps its seq, so it becomes its
// aggregate's head again and goes out before the aggregate's pending events,
// all of which come after it. That only holds if no relay is publishing an
// event of the aggregate while the replay commits (that event would race the
// replay), and none can start to until it has:
// 1. The aggregate's row in outbox_aggregate_locks (re-created if cleanup
//    pruned it) is locked, SKIP LOCKED: a producer writing the aggregate right
//    now holds it (its events may be claimed the moment it commits), so the
//    aggregate is busy; once we hold it, producers of the aggregate wait for
//    our commit, and their events are numbered after ours.
// 2. The aggregate's head (earliest unfinished event) is locked, SKIP LOCKED,
//    and written: a claim takes an aggregate only from its head, locked (see
//    claim-batch.ts), so no claim takes any of it until we commit, and one
//    whose snapshot is older than our commit finds the head rewritten and
//    leaves it; a head we cannot lock is being claimed right now: busy.
// 3. An unfinished event of the aggregate under a live lease is being
//    published: busy.
// Events of busy aggregates are left as they are (still published, still
// matching): the caller reports them, and the next call takes them.
const ENSURE_AGGREGATE_LOCKS = (t: OutboxTables) => `
INSERT INTO ${t.aggregateLocks} (aggregate_type, aggregate_id)
SELECT t, i FROM unnest($1::text[], $2::text[]) AS a(t, i)
ORDER BY t, i
ON CONFLICT (aggregate_type, aggregate_id) DO NOTHING`;

const LOCK_AGGREGATES = (t: OutboxTables) => `
SELECT l.aggregate_type, l.aggregate_id
FROM ${t.aggregateLocks} l
JOIN unnest($1::text[], $2::text[]) AS a(t, i) ON l.aggregate_type = a.t AND l.aggregate_id = a.i
FOR UPDATE OF l SKIP LOCKED`;

const HEADS = (t: OutboxTables) => `
SELECT h.id, a.t AS aggregate_type, a.i AS aggregate_id
FROM unnest($1::text[], $2::text[]) AS a(t, i)
CROSS JOIN LATERAL (
  SELECT e.id
  FROM ${t.events} e
  WHERE num_nulls(e.processed_at, e.dead_lettered_at) = 2
    AND e.aggregate_type = a.t
    AND e.aggregate_id = a.i
  ORDER BY e.aggregate_type, e.aggregate_id, e.seq
  LIMIT 1) h`;

// Locked and written (a new row version, nothing changed): a claim whose
// snapshot predates our commit and still takes this row for the head sees
// it rewritten and leaves it (claim-batch.ts, the re-check in \`locked\`).
// Still unfinished, checked on the row's newest version once it is locked:
// a head that its relay recorded as published since HEADS read it is no
// head any more (the next event is), and is reported busy, not taken.
const LOCK_HEADS = (t: OutboxTables) => `
WITH mine AS (
  SELECT id FROM ${t.events}
  WHERE id = ANY($1::uuid[])
    AND num_nulls(processed_at, dead_lettered_at) = 2
  FOR UPDATE SKIP LOCKED)
UPDATE ${t.events} e
SET locked_by = e.locked_by
WHERE e.id = ANY (ARRAY(SELECT mine.id FROM mine))
RETURNING e.id`;

const LEASED = (t: OutboxTables) => `
SELECT DISTINCT e.aggregate_type, e.aggregate_id
FROM unnest($1::text[], $2::text[]) AS a(t, i)
JOIN ${t.events} e
  ON e.aggregate_type = a.t AND e.aggregate_id = a.i
WHERE num_nulls(e.processed_at, e.dead_lettered_at) = 2
  AND e.locked_until > now()`;

const key = (type: string, id: string) => `${type}\u0000${id}`;

function columns(aggregates: ReadonlyArray<{ aggregateType: string; aggregateId: string }>) {
  const unique = new Map(aggregates.map((a) => [key(a.aggregateType, a.aggregateId), a]));
  const list = [...unique.values()];
  return [list.map((a) => a.aggregateType), list.map((a) => a.aggregateId)];
}

/**
 * Of the aggregates of `events`, those a relay is publishing right now (or
 * may start to before the caller's transaction commits): see the comment
 * above. With `lock` (a real replay, inside its transaction), also takes the
 * locks that keep producers and claims off the other aggregates until the
 * transaction ends; without it (a dry run) only the leases are checked.
 */
export async function busyAggregates(
  db: Queryable,
  events: readonly SelectedEvent[],
  options: { lock: boolean; schema?: string | undefined },
): Promise<Set<string>> {
  const busy = new Set<string>();
  if (events.length === 0) return busy;
  const tables = outboxTables(options.schema);
  const [types, ids] = columns(events);
  if (options.lock) {
    await db.query(ENSURE_AGGREGATE_LOCKS(tables), [types, ids]);
    const { rows: held } = await db.query<{ aggregate_type: string; aggregate_id: string }>(
      LOCK_AGGREGATES(tables),
      [types, ids],
    );
    const ours = new Set(held.map((r) => key(r.aggregate_type, r.aggregate_id)));
    types!.forEach((t, n) => {
      if (!ours.has(key(t, ids![n]!))) busy.add(key(t, ids![n]!));
    });
    const { rows: heads } = await db.query<{ id: string; aggregate_type: string; aggregate_id: string }>(
      HEADS(tables),
      [types, ids],
    );
    if (heads.length > 0) {
      const { rows: locked } = await db.query<{ id: string }>(LOCK_HEADS(tables), [heads.map((h) => h.id)]);
      const got = new Set(locked.map((r) => r.id));
      for (const head of heads) {
        if (!got.has(head.id)) busy.add(key(head.aggregate_type, head.aggregate_id));
      }
    }
  }
  const { rows: leased } = await db.query<{ aggregate_type: string; aggregate_id: string }>(LEASED(tables), [
    types,
    ids,
  ]);
  for (const r of leased) busy.add(key(r.aggregate_type, r.aggregate_id));
  return busy;
}

/** The key {@link busyAggregates} uses for an event's aggregate. */
export const aggregateKey = (event: SelectedEvent) => key(event.aggregateType, event.aggregateId);

// Back to pending, as a replay of `replay_id`: the claim's partial indexes
// pick the row up again and the relay publishes it with the replay marker.
// Kept: id, seq (its place in its aggregate's order), created_at, payload,
// headers, last_error, redrive_count. first_processed_at keeps the first
// publication; attempts, backoff, lease and delivered targets start afresh
// (a replay goes to every target the routes name now).
// `processed_at IS NOT NULL AND discarded_at IS NULL` again, so the statement
// only ever takes published rows, even without the preceding lock.
const RESET = (t: OutboxTables) => `
UPDATE ${t.events}
SET processed_at = NULL,
    first_processed_at = coalesce(first_processed_at, processed_at),
    replay_id = $2::uuid,
    replayed_at = now(),
    replay_count = replay_count + 1,
    attempts = 0,
    retry_after = NULL,
    locked_until = NULL,
    locked_by = NULL,
    waiting_for = NULL,
    failing_since = NULL,
    claimed_alone = false,
    delivered_targets = '{}'::text[]
WHERE id = ANY($1::uuid[])
  AND processed_at IS NOT NULL
  AND discarded_at IS NULL
RETURNING id`;

/** Puts the given published events back to pending as replay `replayId`; returns the ids it reset. */
export async function resetForReplay(
  db: Queryable,
  ids: readonly string[],
  replayId: string,
  schema?: string,
): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const { rows } = await db.query<{ id: string }>(RESET(outboxTables(schema)), [ids, replayId]);
  return new Set(rows.map((r) => r.id));
}

const AUDIT = (t: OutboxTables) => `
INSERT INTO ${t.replays} (id, requested_by, caller, filter, matched, replayed, event_ids)
VALUES ($1::uuid, $2::text, $3::jsonb, $4::jsonb, $5::int, $6::int, $7::uuid[])
RETURNING requested_at`;

export interface ReplayAudit {
  id: string;
  requestedBy: string;
  caller: Record<string, unknown>;
  filter: Record<string, unknown>;
  matched: number;
  eventIds: readonly string[];
}

/** Writes the replay's audit row (in the replay's transaction); returns when it was recorded. */
export async function insertReplayAudit(db: Queryable, audit: ReplayAudit, schema?: string): Promise<Date> {
  const { rows } = await db.query<{ requested_at: Date }>(AUDIT(outboxTables(schema)), [
    audit.id,
    audit.requestedBy,
    JSON.stringify(audit.caller),
    JSON.stringify(audit.filter),
    audit.matched,
    audit.eventIds.length,
    audit.eventIds,
  ]);
  return rows[0]!.requested_at;
}

/** One row of `outbox_replays`. */
export interface ReplayRecord {
  id: string;
  requestedAt: Date;
  requestedBy: string;
  caller: Record<string, unknown>;
  filter: Record<string, unknown>;
  matched: number;
  replayed: number;
  /** Of the replayed events, how many have not been republished yet (pending or dead-lettered). */
  waiting: number;
}

const LIST = (t: OutboxTables) => `
SELECT r.id, r.requested_at, r.requested_by, r.caller, r.filter, r.matched, r.replayed,
       (SELECT count(*)::int FROM ${t.events} e
        WHERE e.replay_id = r.id AND e.processed_at IS NULL) AS waiting
FROM ${t.replays} r
ORDER BY r.requested_at DESC, r.id
LIMIT $1`;

/** The most recent replays, newest first, with how many of their events still wait to go out. */
export async function listReplays(
  db: Queryable,
  options: { limit?: number | undefined; schema?: string | undefined } = {},
): Promise<ReplayRecord[]> {
  const { rows } = await db.query(LIST(outboxTables(options.schema)), [options.limit ?? 20]);
  return rows.map((r) => ({
    id: r.id,
    requestedAt: r.requested_at,
    requestedBy: r.requested_by,
    caller: r.caller,
    filter: r.filter,
    matched: r.matched,
    replayed: r.replayed,
    waiting: r.waiting,
  }));
}

// Retention of the audit trail: replays requested before the cutoff, oldest
// first, in bounded batches like the other cleanup statements, except those
// with an event still waiting to be republished (pending, or a dead-lettered
// replay): the audit row explains why that event is pending again. Found
// through outbox_events_replays_waiting, which holds only such rows.
const DELETE_OLD_REPLAYS = (t: OutboxTables) => `
DELETE FROM ${t.replays}
WHERE id IN (
  SELECT r.id FROM ${t.replays} r
  WHERE r.requested_at < $1::timestamptz
    AND NOT EXISTS (
      SELECT 1 FROM ${t.events} e
      WHERE e.replay_id = r.id AND e.replay_id IS NOT NULL AND e.processed_at IS NULL)
  ORDER BY r.requested_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED)`;

/** Deletes at most `limit` audit rows of replays requested before `cutoff` with no event still waiting; returns how many. */
export async function deleteOldReplays(
  db: Queryable,
  cutoff: Date,
  limit: number,
  schema?: string,
): Promise<number> {
  const result = await db.query(DELETE_OLD_REPLAYS(outboxTables(schema)), [cutoff, limit]);
  return result.rowCount ?? 0;
}
