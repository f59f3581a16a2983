import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, perSchema } from '../db/schema.js';
import type { OutboxEvent } from '../outbox/types.js';

export interface ClaimParams {
  /** Most rows to claim. */
  limit: number;
  /** Lease length; the rows are the caller's until then, without any open transaction. */
  leaseMs: number;
  /** Lease owner id, unique to this claim; only it can record outcomes. */
  leaseId: string;
  /** Attempts after which a row is dead-lettered instead of claimed again. */
  maxAttempts: number;
  /** Per-aggregate ordering: claim an aggregate only from its earliest unfinished event (its head). */
  ordered: boolean;
  /**
   * Ordered mode only: `block` (the default) treats a dead letter as its
   * aggregate's unfinished head, so nothing after it is claimed until an
   * operator redrives or discards it; `skip` lets the aggregate's later
   * events pass it.
   */
  deadLetterPolicy?: 'block' | 'skip';
  /**
   * Ordered mode only: most events of one aggregate per claim, its head and
   * the unfinished events right behind it (a run), in seq order. Default 1
   * (the head alone).
   */
  perAggregate?: number;
  /**
   * Unordered mode only: look at rows from this seq up. A relay passes the
   * lowest seq its last claim took, so the index scan starts there instead
   * of stepping over every entry of rows published since the oldest open
   * snapshot (a long transaction elsewhere keeps those entries alive; see
   * "Long transactions and the outbox" in docs/operations.md). Rows below it
   * (a transaction that committed late, a retry whose wait ended, an expired
   * lease) are found by the next claim without it.
   */
  fromSeq?: string;
  /**
   * Most payload bytes per claim (`payload_bytes`, else the text's length):
   * rows are taken in claim order while the bytes of those before them are
   * under it, so a claim holds at most this plus one payload, and always at
   * least one row. Default: no limit.
   */
  maxBytes?: number | undefined;
  /** The outbox tables' schema; unqualified names when absent. */
  schema?: string | undefined;
  /**
   * The claiming process holds other leases now (another batch of the same
   * relay in flight): a claim of one row is then not "alone" (see "Fault
   * isolation" below), since whatever kills the process takes the other
   * batch with it. Default false.
   */
  othersInFlight?: boolean;
}

export interface ClaimResult {
  events: OutboxEvent[];
  /** Rows found to have used every attempt without an outcome; now dead letters. */
  exhausted: Array<{ id: string; eventType: string; aggregateId: string; attempts: number }>;
  /** The lowest seq among the rows claimed (events and exhausted), if any. */
  minSeq?: string;
  /**
   * The claim is a suspect: an orphan (a row whose lease ran out without an
   * outcome) taken alone, to learn whether it kills the relay by itself.
   */
  suspect: boolean;
}

// Why it is shaped this way:
// - One statement that commits at once: SKIP LOCKED hands concurrent relays
//   disjoint rows, and the lease (locked_until, locked_by) keeps them ours
//   after the row locks are gone, so no transaction spans the AWS calls.
// - The WHERE clause repeats the partial index predicate so the planner walks
//   outbox_events_claimable in seq order and stops after LIMIT rows.
// - A row is claimable when it is not leased (or its lease expired: the relay
//   holding it died) and not backing off.
// - Fault isolation. A row still carrying a lease holder (`locked_by`) when
//   it is claimable again is an orphan: its lease expired without an outcome
//   (the relay died, timed out, or could not record the outcome). If the
//   claim finds orphans among the rows it would take, it takes only the
//   earliest of them, alone (`suspect`), and leaves the rest for the next
//   claims. An orphan of a batch is not known to be at fault: its lost lease
//   is not counted (attempts stay as they were). An orphan whose lost lease
//   held it alone killed the relay by itself: that lease counts, and once its
//   attempts are used up the claim dead-letters it instead of looping
//   forever. So a poison row ends in dead letters alone, its neighbours are
//   published. "Alone" means alone in the process: a claim of one row while
//   the same relay has another batch in flight (`othersInFlight`) is not
//   alone, since a crash takes both; the relay isolates a suspect in its
//   process (no other batch in flight while it publishes) and then marks it
//   alone (`markClaimedAlone`).
// - Every other claim counts as an attempt (an outcome that blames the
//   environment gives it back, see complete-batch.ts).
//
// Ordered mode claims, for each aggregate whose head (earliest unfinished
// event) is claimable, the head and up to `perAggregate` - 1 unfinished events
// right behind it (its run), all in one lease. An aggregate is claimed only
// from its head, and only as a whole prefix of its run, so two relays can
// never hold events of one aggregate at once (see `picked`). Its cost must
// depend neither on table statistics nor on how many rows wait behind a
// blocked aggregate:
// - `walk` / `walk_heads`, the common case: the first 2 × limit unfinished
//   rows in seq order (outbox_events_claimable). The walk is a prefix of all
//   unfinished rows in seq order, so the first walked row of an aggregate is
//   its head (its earliest unfinished row): DISTINCT ON, no probe per row.
//   The heads found there are the oldest heads there are; if at least `limit`
//   of them are claimable, or the walk saw every unfinished row (fewer than
//   2 × limit), they are the answer and nothing else runs. Bounded: 2 × limit
//   rows whatever the backlog.
// - `free_heads`, the second look, when the walk found too few: the rows a
//   claim could take at all, i.e. not leased and either not backing off
//   (outbox_events_ready, seq order) or due (outbox_events_retry_due, the
//   due part only), 2 × limit of each. A held head (leased, or backing off
//   while its target is down) is in neither, so when most aggregates are
//   held this costs what there is to claim, not what is held. These rows
//   are not a prefix of the unfinished rows, so each aggregate's earliest
//   one here is checked to be its head by one probe of
//   outbox_events_aggregate_heads. When neither part was full, every
//   claimable row was seen: what it found is the answer even if it is less
//   than `limit` (an empty claim with 100,000 held aggregates stays cheap).
//   The heads the walk found are kept too (the oldest there are).
//   It runs only when the walk met many held aggregates (at least a quarter
//   of `limit` whose heads are not claimable): when the walk is one blocked
//   aggregate's tail, the second look would see that same tail, so the
//   claim goes to `heads` at once.
// - `heads`, only when the second look was full and still found too few (a
//   blocked aggregate's tail, or held heads' tails, fill the front): a
//   recursive skip scan over
//   outbox_events_aggregate_heads, one `ORDER BY type, id, seq LIMIT 1` probe
//   per aggregate with unfinished events, however many rows each has (an
//   aggregate with a million queued rows costs one probe). It runs only
//   then: the branch reading it is gated by a one-time filter, and a CTE
//   nobody reads is never computed.
// - Without statistics PostgreSQL guesses that `x IS NULL` matches 0.5% of
//   rows, so every partial index whose predicate the WHERE implies looks
//   nearly empty and it may walk the wrong one, filtering row by row (the
//   whole backlog). So each part of the statement states "unfinished" in its
//   own words, which imply exactly one index's predicate or none:
//   `num_nulls(...) = 2` in the probes (only outbox_events_aggregate_heads,
//   already in the probe's order), `coalesce(...) IS NULL` in the re-check
//   (no partial index: the primary key is the only way in), and `IS NULL` in
//   the walk and the unordered claim (outbox_events_claimable, in seq order).
//   Keep them that way.
// - Claimable heads: not leased, not backing off and, with the `block`
//   policy, no dead letter of their aggregate before them (a probe of
//   outbox_events_dead_letters_by_aggregate). The oldest $1 by seq are
//   `chosen`.
// - `run`: for each chosen head, one probe of outbox_events_aggregate_heads
//   from the head on (LIMIT $5 = perAggregate rows, in seq order). With
//   `block`, also one probe for the first dead letter after the head: the run
//   stops before it. `cand` keeps the prefix of each run that is free (not
//   leased, not backing off) and, with `block`, stops after an exhausted row
//   (the claim dead-letters it; nothing behind it may pass). The first $1 rows
//   by (head, seq) are the candidates: whole runs of the oldest heads.
//   Reading stops once $1 candidates are out (the runs come sorted by head).
// - `locked` locks the candidates by primary key (id = ANY(array)) and
//   re-checks them. After the lock the re-check runs on the newest row
//   version (READ COMMITTED), so a row finished or claimed by another relay
//   since our snapshot is skipped, as is one SKIP LOCKED finds locked.
// - ... and so is any row written since our snapshot (its newest version's
//   xmin is not the one we read). The re-check can only see the rows it
//   locks, and head-ness is a fact about other rows: a replay (or redrive)
//   that made an earlier event of the aggregate unfinished again after our
//   snapshot was taken is invisible to it. So replay and redrive write the
//   aggregate's current head in their transaction (busyAggregates in
//   replay-events.ts); a claim whose snapshot still saw that row as the head
//   finds it rewritten and leaves the aggregate to the next claim, which sees
//   the new head. Without that, the stale claim would lease the old head
//   while the next claim leased the replayed event: two relays on one
//   aggregate, the later event first.
// - `picked` keeps, of each run, only the rows whose every predecessor in the
//   run was locked too: a prefix from the head. Another relay holding (or
//   having just finished) any earlier row of the run thus cuts the run there,
//   and a relay never takes the middle of an aggregate. Rows locked but not
//   kept are released when the statement commits, untouched.
// - With `skip`, dead letters are not unfinished: they fall out of the partial
//   indexes and their aggregate's next event becomes its head.
function orderedPicked(t: OutboxTables, policy: 'block' | 'skip'): string {
  // Claimable: not leased, not backing off, and (block) no dead letter of its aggregate before it.
  const free = (h: string) => `(${h}.locked_until IS NULL OR ${h}.locked_until < now())
        AND (${h}.retry_after IS NULL OR ${h}.retry_after <= now())`;
  const claimable = (h: string) =>
    `${free(h)}${
      policy === 'block'
        ? `
        AND NOT EXISTS (
          SELECT 1 FROM ${t.events} d
          WHERE d.dead_lettered_at IS NOT NULL
            AND d.aggregate_type = ${h}.aggregate_type
            AND d.aggregate_id = ${h}.aggregate_id
            AND d.seq < ${h}.seq)`
        : ''
    }`;
  return `
WITH RECURSIVE walk AS (
  SELECT e.aggregate_type, e.aggregate_id, e.seq, e.id, e.locked_until, e.retry_after, e.xmin AS row_xmin
  FROM ${t.events} e
  WHERE e.processed_at IS NULL AND e.dead_lettered_at IS NULL
  ORDER BY e.seq
  LIMIT $1 * 2
),
walk_heads AS (
  SELECT w.*
  FROM (
    SELECT DISTINCT ON (walk.aggregate_type, walk.aggregate_id) walk.*
    FROM walk
    ORDER BY walk.aggregate_type, walk.aggregate_id, walk.seq) w
  WHERE ${claimable('w')}
),
heads AS (
  (SELECT e.aggregate_type, e.aggregate_id, e.seq, e.id, e.locked_until, e.retry_after, e.xmin AS row_xmin
   FROM ${t.events} e
   WHERE num_nulls(e.processed_at, e.dead_lettered_at) = 2
   ORDER BY e.aggregate_type, e.aggregate_id, e.seq
   LIMIT 1)
  UNION ALL
  SELECT next.*
  FROM heads h
  CROSS JOIN LATERAL (
    SELECT e.aggregate_type, e.aggregate_id, e.seq, e.id, e.locked_until, e.retry_after, e.xmin AS row_xmin
    FROM ${t.events} e
    WHERE num_nulls(e.processed_at, e.dead_lettered_at) = 2
      AND (e.aggregate_type, e.aggregate_id) > (h.aggregate_type, h.aggregate_id)
    ORDER BY e.aggregate_type, e.aggregate_id, e.seq
    LIMIT 1) next
),
ready AS (
  SELECT e.aggregate_type, e.aggregate_id, e.seq, e.id, e.locked_until, e.retry_after, e.xmin AS row_xmin
  FROM ${t.events} e
  WHERE e.retry_after IS NULL AND e.processed_at IS NULL AND e.dead_lettered_at IS NULL
    AND (e.locked_until IS NULL OR e.locked_until < now())
  ORDER BY e.seq
  LIMIT $1 * 2
),
due AS (
  SELECT e.aggregate_type, e.aggregate_id, e.seq, e.id, e.locked_until, e.retry_after, e.xmin AS row_xmin
  FROM ${t.events} e
  WHERE e.retry_after <= now() AND e.processed_at IS NULL AND e.dead_lettered_at IS NULL
    AND (e.locked_until IS NULL OR e.locked_until < now())
  ORDER BY e.retry_after
  LIMIT $1 * 2
),
free_heads AS (
  SELECT f.*
  FROM (
    SELECT DISTINCT ON (x.aggregate_type, x.aggregate_id) x.*
    FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) x
    ORDER BY x.aggregate_type, x.aggregate_id, x.seq) f
  WHERE NOT EXISTS (
      SELECT 1 FROM ${t.events} b
      WHERE num_nulls(b.processed_at, b.dead_lettered_at) = 2
        AND b.aggregate_type = f.aggregate_type
        AND b.aggregate_id = f.aggregate_id
        AND b.seq < f.seq)
    AND ${claimable('f')}
),
look AS (
  SELECT CASE
    WHEN (SELECT count(*) FROM walk_heads) >= $1 OR (SELECT count(*) FROM walk) < $1 * 2 THEN 'walk'
    WHEN (SELECT count(*) FROM (SELECT DISTINCT w.aggregate_type, w.aggregate_id FROM walk w) d)
         - (SELECT count(*) FROM walk_heads) < greatest(1, $1 / 4) THEN 'all'
    WHEN (SELECT count(*) FROM free_heads) >= $1
      OR ((SELECT count(*) FROM ready) < $1 * 2 AND (SELECT count(*) FROM due) < $1 * 2) THEN 'free'
    ELSE 'all'
  END AS way
),
chosen AS (
  (SELECT w.aggregate_type, w.aggregate_id, w.seq FROM walk_heads w
   WHERE (SELECT way FROM look) = 'walk'
   ORDER BY w.seq
   LIMIT $1)
  UNION ALL
  (SELECT f.aggregate_type, f.aggregate_id, f.seq
   FROM (SELECT x.aggregate_type, x.aggregate_id, x.seq FROM free_heads x
         UNION
         SELECT w.aggregate_type, w.aggregate_id, w.seq FROM walk_heads w) f
   WHERE (SELECT way FROM look) = 'free'
   ORDER BY f.seq
   LIMIT $1)
  UNION ALL
  (SELECT h.aggregate_type, h.aggregate_id, h.seq FROM heads h
   WHERE (SELECT way FROM look) = 'all'
     AND ${claimable('h')}
   ORDER BY h.seq
   LIMIT $1)
),
run AS (
  SELECT r.id, h.seq AS head_seq, r.seq, r.row_xmin, r.bytes, ${free('r')} AS free,
         r.attempts >= $4 AS exhausted
  FROM chosen h
  CROSS JOIN LATERAL (
    SELECT e.id, e.seq, e.locked_until, e.retry_after, e.attempts, e.xmin AS row_xmin,
           ${BYTES('e')} AS bytes
    FROM ${t.events} e
    WHERE num_nulls(e.processed_at, e.dead_lettered_at) = 2
      AND e.aggregate_type = h.aggregate_type
      AND e.aggregate_id = h.aggregate_id
      AND e.seq >= h.seq
    ORDER BY e.aggregate_type, e.aggregate_id, e.seq
    LIMIT $5) r${
      policy === 'block'
        ? `
  LEFT JOIN LATERAL (
    SELECT d.seq
    FROM ${t.events} d
    WHERE d.dead_lettered_at IS NOT NULL
      AND d.aggregate_type = h.aggregate_type
      AND d.aggregate_id = h.aggregate_id
      AND d.seq > h.seq
    ORDER BY d.aggregate_type, d.aggregate_id, d.seq
    LIMIT 1) dead ON true
  WHERE dead.seq IS NULL OR r.seq < dead.seq`
        : ''
    }
),
cand AS (
  SELECT c.id, c.head_seq, c.seq, c.row_xmin, c.bytes,
         row_number() OVER (PARTITION BY c.head_seq ORDER BY c.seq) AS position
  FROM (
    SELECT run.*,
           bool_and(run.free) OVER w AS all_free,
           coalesce(bool_or(run.exhausted) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), false)
             AS after_exhausted
    FROM run
    WINDOW w AS (PARTITION BY run.head_seq ORDER BY run.seq)) c
  WHERE c.all_free${policy === 'block' ? ' AND NOT c.after_exhausted' : ''}
  ORDER BY c.head_seq, c.seq
  LIMIT $1
),
locked AS (
  SELECT e.id, e.locked_by IS NOT NULL AS orphan
  FROM ${t.events} e
  WHERE e.id = ANY (ARRAY(SELECT cand.id FROM cand))
    AND coalesce(e.processed_at, e.dead_lettered_at) IS NULL
    AND (e.locked_until IS NULL OR e.locked_until < now())
    AND (e.retry_after IS NULL OR e.retry_after <= now())
    AND e.id::text || '/' || e.xmin::text = ANY (ARRAY(SELECT c.id::text || '/' || c.row_xmin::text FROM cand c))
  FOR UPDATE SKIP LOCKED
),
picked AS (
  SELECT k.id, k.seq, k.orphan, k.position = 1 AS head, k.head_seq AS ord, k.bytes
  FROM (
    SELECT g.id, g.seq, g.head_seq, g.bytes, g.position, coalesce(g.orphan, false) AS orphan,
           count(*) FILTER (WHERE g.got) OVER (PARTITION BY g.head_seq ORDER BY g.seq) AS locked_so_far
    FROM (SELECT cand.*, cand.id IN (SELECT locked.id FROM locked) AS got,
                 cand.id IN (SELECT locked.id FROM locked WHERE locked.orphan) AS orphan
          FROM cand) g) k
  WHERE k.locked_so_far = k.position
)`;
}

const unorderedPicked = (t: OutboxTables, fromSeq: boolean) => `
WITH picked AS (
  SELECT e.id, e.seq, e.locked_by IS NOT NULL AS orphan, true AS head, e.seq AS ord, ${BYTES('e')} AS bytes
  FROM ${t.events} e
  WHERE e.processed_at IS NULL
    AND e.dead_lettered_at IS NULL
    AND (e.locked_until IS NULL OR e.locked_until < now())
    AND (e.retry_after IS NULL OR e.retry_after <= now())${fromSeq ? '\n    AND e.seq >= $5::bigint' : ''}
  ORDER BY e.seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)`;

// A row's payload size for the byte budget: what the producer wrote
// (payload_bytes), else the text's length: the stored size may be a
// fraction of it (TOAST compresses), and what the relay holds is the text.
// Only rows written without payload_bytes (before it existed, or by other
// tools) pay for the conversion.
const BYTES = (e: string) => `coalesce(${e}.payload_bytes, octet_length(${e}.payload::text))::bigint`;

// The tail shared by both modes: `picked` (id, seq, orphan, head, ord, bytes)
// is what the claim would take, in claim order (ord, seq): seq, or in
// ordered mode each run after the one before (head seq), so that cutting it
// anywhere leaves whole runs and a prefix of one. `budgeted` cuts it where
// the bytes before a row reach the budget (the first row always stays).
// Rows locked but cut are released at commit, untouched. With an orphan
// among the heads, only the earliest one is taken (see "Fault isolation"
// above). In the SET list, `e` is the row as it was before this claim:
// `e.locked_by IS NOT NULL` is "orphan" and `e.claimed_alone` says whether
// its lost lease held it alone.
function claimSql(t: OutboxTables, picked: string, budget: string, othersInFlight: string): string {
  const spent = `e.locked_by IS NOT NULL AND e.claimed_alone AND e.attempts >= $4`;
  return `${picked},
budgeted AS (
  SELECT b.id, b.seq, b.orphan, b.head
  FROM (
    SELECT p.*,
           coalesce(sum(p.bytes) OVER (ORDER BY p.ord, p.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
             AS bytes_before,
           row_number() OVER (ORDER BY p.ord, p.seq) AS n
    FROM picked p) b
  WHERE b.n = 1 OR b.bytes_before < ${budget}::bigint
),
suspect AS (
  SELECT p.id FROM budgeted p WHERE p.orphan AND p.head ORDER BY p.seq LIMIT 1
),
taken AS (
  SELECT s.id FROM suspect s
  UNION ALL
  SELECT p.id FROM budgeted p WHERE NOT EXISTS (SELECT 1 FROM suspect)
),
size AS (SELECT count(*) AS n FROM taken)
UPDATE ${t.events} e
SET attempts = CASE WHEN ${spent} THEN e.attempts
                    WHEN e.locked_by IS NOT NULL AND NOT e.claimed_alone THEN e.attempts
                    ELSE e.attempts + 1 END,
    locked_until = CASE WHEN ${spent} THEN NULL ELSE now() + $2 * interval '1 millisecond' END,
    locked_by = CASE WHEN ${spent} THEN NULL ELSE $3::uuid END,
    claimed_alone = (SELECT n FROM size) = 1 AND NOT ${othersInFlight}::boolean,
    dead_lettered_at = CASE WHEN ${spent} THEN now() END,
    last_error = CASE WHEN ${spent}
      THEN 'attempt limit reached: lease expired without an outcome after ' || e.attempts
           || ' attempts in which it was claimed alone (the relay crashed or timed out while publishing it)'
           || coalesce('; previous error: ' || e.last_error, '')
      ELSE e.last_error END
FROM taken
WHERE e.id = taken.id
RETURNING e.id, e.seq, e.aggregate_type, e.aggregate_id, e.event_type, e.payload::text AS payload_json, e.headers,
          e.created_at, e.attempts, e.delivered_targets, e.dead_lettered_at IS NOT NULL AS exhausted,
          e.replay_id, e.replayed_at, e.failing_since, EXISTS (SELECT 1 FROM suspect) AS suspect`;
}

// $5 is the ordered claim's perAggregate or the unordered claim's fromSeq;
// the budget and othersInFlight come after it.
const claimStatements = perSchema((t) => ({
  unordered: claimSql(t, unorderedPicked(t, false), '$5', '$6'),
  unorderedFrom: claimSql(t, unorderedPicked(t, true), '$6', '$7'),
  block: claimSql(t, orderedPicked(t, 'block'), '$6', '$7'),
  skip: claimSql(t, orderedPicked(t, 'skip'), '$6', '$7'),
}));

interface Row {
  id: string;
  seq: string;
  aggregate_type: string;
  aggregate_id: string;
  event_type: string;
  payload_json: string;
  headers: Record<string, string>;
  created_at: Date;
  attempts: number;
  delivered_targets: string[];
  exhausted: boolean;
  replay_id: string | null;
  replayed_at: Date | null;
  failing_since: Date | null;
  suspect: boolean;
}

/**
 * Orders two `seq` values as pg returns them (bigint as a decimal string):
 * an identity column's values are positive and have no leading zeros, so
 * the shorter string is the smaller number, and strings of one length
 * compare as numbers do. No BigInt per comparison (a batch of 100 sorts
 * with about 700 of them).
 */
export function compareSeq(a: string, b: string): number {
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Claims up to `limit` publishable rows under a new lease; see the comment above for the rules. */
export async function claimBatch(db: Queryable, params: ClaimParams): Promise<ClaimResult> {
  const from = !params.ordered && params.fromSeq !== undefined;
  const SQL = claimStatements(params.schema);
  const sql = params.ordered
    ? SQL[params.deadLetterPolicy ?? 'block']
    : from
      ? SQL.unorderedFrom
      : SQL.unordered;
  const values: unknown[] = [params.limit, params.leaseMs, params.leaseId, params.maxAttempts];
  if (params.ordered) values.push(Math.max(1, Math.min(params.perAggregate ?? 1, params.limit)));
  else if (from) values.push(params.fromSeq);
  // Absent: a budget nothing reaches (bigint's largest value).
  values.push(
    params.maxBytes === undefined ? '9223372036854775807' : String(Math.max(0, Math.floor(params.maxBytes))),
  );
  values.push(params.othersInFlight === true);
  const { rows } = await db.query<Row>(sql, values);
  const result: ClaimResult = { events: [], exhausted: [], suspect: false };
  // UPDATE ... RETURNING gives no order guarantee; publish in seq order.
  rows.sort((a, b) => compareSeq(a.seq, b.seq));
  if (rows.length > 0) result.minSeq = rows[0]?.seq;
  for (const row of rows) {
    if (row.exhausted) {
      result.exhausted.push({
        id: row.id,
        eventType: row.event_type,
        aggregateId: row.aggregate_id,
        attempts: row.attempts,
      });
    } else {
      result.events.push(
        withLazyPayload({
          id: row.id,
          seq: row.seq,
          aggregateType: row.aggregate_type,
          aggregateId: row.aggregate_id,
          eventType: row.event_type,
          payloadJson: row.payload_json,
          headers: row.headers,
          createdAt: row.created_at,
          attempts: row.attempts,
          deliveredTargets: row.delivered_targets,
          // Pending again because an operator replayed it (see replay-events.ts).
          ...(row.replay_id ? { replayId: row.replay_id, replayedAt: row.replayed_at ?? undefined } : {}),
          ...(row.failing_since ? { failingSince: row.failing_since } : {}),
        }),
      );
    }
  }
  // A suspect dead-lettered by this claim (its attempts were used up) is not in flight.
  result.suspect = result.events.length > 0 && rows.some((r) => r.suspect);
  return result;
}

const markAloneStatements = perSchema(
  (t) => `UPDATE ${t.events} SET claimed_alone = true
          WHERE id = $1 AND locked_by = $2::uuid AND locked_until > now() AND processed_at IS NULL`,
);

/**
 * Marks a row claimed as a suspect while its relay had other batches in
 * flight as claimed alone, once those have ended and before it is published:
 * from now on a crash of the relay is its own. False when the lease has run
 * out meanwhile (the row is not the caller's any more: do not publish it).
 */
export async function markClaimedAlone(
  db: Queryable,
  params: { id: string; leaseId: string; schema?: string | undefined },
): Promise<boolean> {
  const { rowCount } = await db.query(markAloneStatements(params.schema), [params.id, params.leaseId]);
  return rowCount === 1;
}

/**
 * The payload travels as its committed text (what the transports publish);
 * the parsed value is made only if someone reads `payload` (a custom
 * publisher, a test), once. Parsing every payload on every claim was wasted
 * work for the relay.
 */
function withLazyPayload(event: Omit<OutboxEvent, 'payload'>): OutboxEvent {
  let parsed: { value: unknown } | undefined;
  return Object.defineProperty(event, 'payload', {
    enumerable: true,
    get() {
      parsed ??= { value: JSON.parse(event.payloadJson) };
      return parsed.value;
    },
  }) as OutboxEvent;
}
