import type { OutboxTables } from '../db/schema.js';

/** Most aggregates the skip scan probes, as a multiple of the limit. */
const SWEEP = 4;

/** How long a head held back by a dead letter (and the rows behind it) stays parked. */
const DEAD_LETTER_PARK = `interval '1 minute'`;

// Ordered mode claims, for each aggregate whose head (earliest unfinished
// event) is claimable, the head and up to `perAggregate` - 1 unfinished events
// right behind it (its run), all in one lease. An aggregate is claimed only
// from its head, and only as a whole prefix of its run, so two relays can
// never hold events of one aggregate at once (see `picked`). Its cost must
// depend neither on table statistics, nor on how many rows wait behind a
// blocked aggregate, nor on how many aggregates there are:
// - `walk` / `walk_heads`, the common case: the first 2 × limit unfinished
//   rows in seq order (outbox_events_claimable). The walk is a prefix of all
//   unfinished rows in seq order, so the first walked row of an aggregate is
//   its head (its earliest unfinished row): DISTINCT ON, no probe per row.
//   If at least `limit` of them are claimable, or the walk saw every
//   unfinished row (fewer than 2 × limit), they are the answer.
// - `look`, the second look, when the walk found too few: the rows a claim
//   could take at all, i.e. not leased and either not backing off
//   (outbox_events_ready, seq order) or due (outbox_events_retry_due, the due
//   part only), 2 × limit of each. A held head (leased, or backing off while
//   its target is down) is in neither part, nor is a parked row (below).
//   These rows are not a prefix of the unfinished rows, so each aggregate's
//   head is found by one probe of outbox_events_aggregate_heads (`look_aggs`);
//   its earliest row here is claimable if it is that head (`free_heads`).
//   When neither part was full, every claimable row was seen: what it found
//   is the answer even if it is less than `limit`.
// - `swept`, only when the second look was full and still found too few: a
//   recursive skip scan over outbox_events_aggregate_heads, one
//   `ORDER BY type, id, seq LIMIT 1` probe per aggregate, however many rows
//   each has (an aggregate with a million queued rows costs one probe), but
//   at most SWEEP × limit aggregates: with few aggregates (one deep one in
//   front, a hundred others) it sees them all; with many it is capped, and
//   parking (next) makes sure the next claims do not need it.
// - Parking, when the sweep was capped: what filled the second look were
//   rows that cannot go yet (a tail behind a head that backs off or is
//   leased, a head held back by a dead letter, the rest of a deep aggregate
//   this claim takes the head of; the events a batch held back behind a
//   head that retries are parked by complete-batch.ts already). The claim
//   parks them: retry_after and parked_until are set to when that hold
//   ends, so they leave both parts of the look until then and the next
//   claims see past them. A head that
//   backs off parks its tail until its retry_after; a leased head until its
//   lease ends, except the earliest row seen (it may be the one right after
//   the leased run, next in line when the run is published); a head this
//   claim takes until this lease ends, except the row right after what it
//   takes; a dead letter for DEAD_LETTER_PARK (a discard lets the aggregate go
//   within that). Every park ends by itself, so a parked row is never lost
//   whatever happens meanwhile; the claim that takes the row right before a
//   parked row clears its park (`unparked`), so an aggregate's next event is
//   claimable as soon as the one before it is published. Both writes find
//   their rows by ctid (TID scans) and only the rows that need them: a claim
//   with nothing to park or unpark reads nothing for it (they scanned the
//   table when it had no statistics: 9,600 rows touched by a plain claim of
//   100 from 1,000 aggregates, 6,500 without). While retry_after =
//   parked_until the row is not backing off on its own account: it counts as
//   free (`free`), so a run led by its head takes it. Parking writes only
//   rows nobody holds and that have not changed since the snapshot (locked
//   SKIP LOCKED and re-checked by xmin, as `locked` does); a park that loses
//   a race only delays a row until it ends. Each row of a tail is parked
//   about once per hold, so an outage with 100,000 held aggregates costs a
//   few hundred claims that park, and then claims that cost what there is to
//   claim. When the sweep saw every aggregate, nothing is parked: a few deep
//   aggregates are cheaper swept than parked row by row.
// - Without statistics PostgreSQL guesses that `x IS NULL` matches 0.5% of
//   rows, so every partial index whose predicate the WHERE implies looks
//   nearly empty and it may walk the wrong one, filtering row by row (the
//   whole backlog). So each part of the statement states "unfinished" in its
//   own words, which imply exactly one index's predicate or none:
//   `num_nulls(...) = 2` in the probes (only outbox_events_aggregate_heads,
//   already in the probe's order), `coalesce(...) IS NULL` in the re-checks
//   (no partial index: the primary key is the only way in), and `IS NULL` in
//   the walk and the unordered claim (outbox_events_claimable, in seq order).
//   Keep them that way.
// - Claimable heads: free (not leased, not backing off) and, with the `block`
//   policy, no dead letter of their aggregate before them (a probe of
//   outbox_events_dead_letters_by_aggregate). The oldest $1 by seq are
//   `chosen`.
// - `run`: for each chosen head, one probe of outbox_events_aggregate_heads
//   from the head on (LIMIT $5 + 1 rows, in seq order: the run, and the row
//   after it, whose park the claim clears if it takes the whole run). With
//   `block`, also one probe for the first dead letter after the head: the run
//   stops before it. `cand` keeps the prefix of each run that is free and,
//   with `block`, stops after an exhausted row (the claim dead-letters it;
//   nothing behind it may pass). The first $1 rows by (head, seq) are the
//   candidates: whole runs of the oldest heads.
// - `locked` locks the candidates where our snapshot read them (a TID scan:
//   ctid = ANY(array), never a scan of the table whatever the statistics
//   say) and re-checks them on the newest row version (READ COMMITTED): a
//   row finished or claimed by another relay since our snapshot is skipped,
//   as is one SKIP LOCKED finds locked.
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
// Parking never decides what is claimed: heads are always checked by a probe
// (or the walk's prefix) and runs read from the index, so a parked row that
// turned out to be a head (a race) is claimed as soon as anything finds it.

/** Not leased, and not backing off on its own account (a park is not). */
const free = (h: string) => `(${h}.locked_until IS NULL OR ${h}.locked_until < now())
        AND (${h}.retry_after IS NULL OR ${h}.retry_after <= now() OR ${h}.retry_after = ${h}.parked_until)`;

/** The row columns every part of the look carries. */
const ROW = (e: string) =>
  `${e}.aggregate_type, ${e}.aggregate_id, ${e}.seq, ${e}.id, ${e}.ctid, ${e}.locked_until, ${e}.retry_after, ${e}.parked_until, ${e}.xmin AS row_xmin`;

/** `picked` (id, seq, orphan, small, lost_size, head, ord, bytes) of the ordered claim; see the comment above. */
export function orderedPicked(t: OutboxTables, policy: 'block' | 'skip'): string {
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
  // The earliest unfinished row of the first aggregate that meets `where`.
  const probe = (where: string) => `
    SELECT ${ROW('e')}
    FROM ${t.events} e
    WHERE num_nulls(e.processed_at, e.dead_lettered_at) = 2${
      where
        ? `
      AND ${where}`
        : ''
    }
    ORDER BY e.aggregate_type, e.aggregate_id, e.seq
    LIMIT 1`;
  // A part of the second look: 2 × limit rows not leased that meet `where`, in `order`.
  const lookPart = (where: string, order: string) => `
  SELECT ${ROW('e')}
  FROM ${t.events} e
  WHERE ${where} AND e.processed_at IS NULL AND e.dead_lettered_at IS NULL
    AND (e.locked_until IS NULL OR e.locked_until < now())
  ORDER BY ${order}
  LIMIT $1 * 2
`;
  return `
WITH RECURSIVE walk AS (
  SELECT ${ROW('e')}
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
ready AS (${lookPart('e.retry_after IS NULL', 'e.seq')}),
due AS (${lookPart('e.retry_after <= now()', 'e.retry_after')}),
look AS (SELECT * FROM ready UNION ALL SELECT * FROM due),
look_aggs AS (
  SELECT f.aggregate_type, f.aggregate_id, f.seq, f.locked_until, f.retry_after, f.parked_until,
         h.seq AS head_seq, h.locked_until AS head_locked_until,
         CASE WHEN h.retry_after IS DISTINCT FROM h.parked_until THEN h.retry_after END AS head_retry_after,
         ${claimable('h')} AS head_claimable
  FROM (
    SELECT DISTINCT ON (x.aggregate_type, x.aggregate_id) x.*
    FROM look x
    ORDER BY x.aggregate_type, x.aggregate_id, x.seq) f
  CROSS JOIN LATERAL (${probe('(e.aggregate_type, e.aggregate_id) = (f.aggregate_type, f.aggregate_id)')}) h
),
free_heads AS (
  SELECT a.aggregate_type, a.aggregate_id, a.seq FROM look_aggs a WHERE a.head_seq = a.seq AND a.head_claimable
),
found AS (
  SELECT x.aggregate_type, x.aggregate_id, x.seq FROM free_heads x
  UNION
  SELECT w.aggregate_type, w.aggregate_id, w.seq FROM walk_heads w
),
heads AS (
  (${probe('')})
  UNION ALL
  SELECT next.*
  FROM heads h
  CROSS JOIN LATERAL (${probe('(e.aggregate_type, e.aggregate_id) > (h.aggregate_type, h.aggregate_id)')}) next
),
swept AS (SELECT * FROM heads LIMIT $1 * ${SWEEP}),
way AS (
  SELECT CASE
    WHEN (SELECT count(*) FROM walk_heads) >= $1 OR (SELECT count(*) FROM walk) < $1 * 2 THEN 'walk'
    WHEN (SELECT count(*) FROM found) >= $1
      OR ((SELECT count(*) FROM ready) < $1 * 2 AND (SELECT count(*) FROM due) < $1 * 2) THEN 'look'
    ELSE 'sweep'
  END AS way
),
chosen AS (
  (SELECT w.aggregate_type, w.aggregate_id, w.seq FROM walk_heads w
   WHERE (SELECT way FROM way) = 'walk'
   ORDER BY w.seq
   LIMIT $1)
  UNION ALL
  (SELECT f.aggregate_type, f.aggregate_id, f.seq FROM found f
   WHERE (SELECT way FROM way) = 'look'
   ORDER BY f.seq
   LIMIT $1)
  UNION ALL
  (SELECT f.aggregate_type, f.aggregate_id, f.seq
   FROM (SELECT x.aggregate_type, x.aggregate_id, x.seq FROM found x
         UNION
         SELECT s.aggregate_type, s.aggregate_id, s.seq FROM swept s WHERE ${claimable('s')}) f
   WHERE (SELECT way FROM way) = 'sweep'
   ORDER BY f.seq
   LIMIT $1)
),
run_all AS (
  SELECT h.aggregate_type, h.aggregate_id, r.id, r.ctid, h.seq AS head_seq, r.seq, r.row_xmin, r.bytes, r.orphan,
         r.small, r.lost_size, ${free('r')} AS free, r.attempts >= $4 AS exhausted,
         r.retry_after = r.parked_until AS parked,
         row_number() OVER (PARTITION BY h.seq ORDER BY r.seq) AS position
  FROM chosen h
  CROSS JOIN LATERAL (
    SELECT e.id, e.ctid, e.seq, e.locked_until, e.retry_after, e.parked_until, e.attempts, e.xmin AS row_xmin,
           ${SIZE_AND_LEASE('e')}
    FROM ${t.events} e
    WHERE num_nulls(e.processed_at, e.dead_lettered_at) = 2
      AND e.aggregate_type = h.aggregate_type
      AND e.aggregate_id = h.aggregate_id
      AND e.seq >= h.seq
    ORDER BY e.aggregate_type, e.aggregate_id, e.seq
    LIMIT $5 + 1) r
),
run AS (
  SELECT r.* FROM run_all r${
    policy === 'block'
      ? `
  LEFT JOIN LATERAL (
    SELECT d.seq
    FROM ${t.events} d
    WHERE d.dead_lettered_at IS NOT NULL
      AND d.aggregate_type = r.aggregate_type
      AND d.aggregate_id = r.aggregate_id
      AND d.seq > r.head_seq
    ORDER BY d.aggregate_type, d.aggregate_id, d.seq
    LIMIT 1) dead ON true
  WHERE r.position <= $5 AND (dead.seq IS NULL OR r.seq < dead.seq)`
      : `
  WHERE r.position <= $5`
  }
),
cand AS (
  SELECT c.id, c.ctid, c.head_seq, c.seq, c.row_xmin, c.bytes, c.orphan, c.small, c.lost_size, c.position
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
  SELECT e.id
  FROM ${t.events} e
  WHERE e.ctid = ANY (ARRAY(SELECT cand.ctid FROM cand))
    AND coalesce(e.processed_at, e.dead_lettered_at) IS NULL
    AND ${free('e')}
    AND e.id::text || '/' || e.xmin::text = ANY (ARRAY(SELECT c.id::text || '/' || c.row_xmin::text FROM cand c))
  FOR UPDATE SKIP LOCKED
),
picked AS (
  SELECT k.id, k.seq, k.orphan, k.small, k.lost_size, k.position = 1 AS head, k.head_seq AS ord, k.bytes
  FROM (
    SELECT g.*,
           count(*) FILTER (WHERE g.got) OVER (PARTITION BY g.head_seq ORDER BY g.seq) AS locked_so_far
    FROM (SELECT cand.*, cand.id IN (SELECT locked.id FROM locked) AS got FROM cand) g) k
  WHERE k.locked_so_far = k.position
)`;
}

/**
 * The CTEs that come after `taken` in the ordered statement: clearing the
 * park of the row right after what was taken, and parking what filled the
 * second look (see "Parking" above).
 */
export function orderedParking(t: OutboxTables): string {
  return `
taken_runs AS (
  SELECT r.aggregate_type, r.aggregate_id, r.ctid, r.seq, r.position, r.parked,
         max(r.position) FILTER (WHERE r.id IN (SELECT taken.id FROM taken)) OVER (PARTITION BY r.head_seq)
           AS last_taken
  FROM run_all r
),
next_up AS (
  SELECT DISTINCT ON (r.aggregate_type, r.aggregate_id) r.aggregate_type, r.aggregate_id,
         CASE WHEN r.position = r.last_taken + 1 THEN r.seq END AS seq,
         CASE WHEN r.position = r.last_taken + 1 AND r.parked THEN r.ctid END AS unpark
  FROM taken_runs r
  WHERE r.last_taken IS NOT NULL
  ORDER BY r.aggregate_type, r.aggregate_id, r.position = r.last_taken + 1 DESC
),
unparked AS (
  UPDATE ${t.events} e
  SET retry_after = NULL, parked_until = NULL
  WHERE e.ctid = ANY (ARRAY(
      SELECT x.ctid FROM ${t.events} x
      WHERE x.ctid = ANY (ARRAY(SELECT n.unpark FROM next_up n WHERE n.unpark IS NOT NULL))
        AND x.retry_after = x.parked_until
      FOR UPDATE SKIP LOCKED))
  RETURNING 1
),
park AS (
  SELECT p.ctid, p.row_xmin, p.until
  FROM (
    SELECT x.ctid, x.row_xmin,
           CASE
             WHEN n.aggregate_id IS NOT NULL THEN
               CASE WHEN x.seq > n.seq THEN now() + $2 * interval '1 millisecond' END
             WHEN a.head_locked_until > now() THEN
               CASE WHEN x.seq > a.seq THEN a.head_locked_until END
             WHEN a.head_retry_after > now() THEN a.head_retry_after
             WHEN NOT a.head_claimable THEN now() + ${DEAD_LETTER_PARK}
           END AS until
    FROM look x
    JOIN look_aggs a ON (a.aggregate_type, a.aggregate_id) = (x.aggregate_type, x.aggregate_id)
    LEFT JOIN next_up n ON (n.aggregate_type, n.aggregate_id) = (x.aggregate_type, x.aggregate_id)
    WHERE (SELECT way FROM way) = 'sweep' AND (SELECT count(*) FROM swept) >= $1 * ${SWEEP}) p
  WHERE p.until > now()
),
parked AS (
  UPDATE ${t.events} e
  SET retry_after = l.until, parked_until = l.until
  FROM (
    SELECT x.ctid AS tid, p.until
    FROM park p
    JOIN ${t.events} x ON x.ctid = p.ctid
    WHERE coalesce(x.processed_at, x.dead_lettered_at) IS NULL
      AND (x.locked_until IS NULL OR x.locked_until < now())
      AND x.xmin = p.row_xmin
    FOR UPDATE OF x SKIP LOCKED) l
  WHERE e.ctid = l.tid
  RETURNING 1
)`;
}

/**
 * The ordered claim's `more_behind`: the aggregate has an event right after
 * what this claim took of it (`next_up`). Should that event be parked once
 * the run is published, it is its aggregate's head and must not wait out
 * the park; this claim clears it (`unparked`), but not while another claim
 * holds the row locked (SKIP LOCKED), nor a park a claim from an older
 * snapshot writes later (it saw the run leased). So the relay clears it
 * again once the run is published (unparkNext).
 */
export const MORE_BEHIND = `(e.aggregate_type, e.aggregate_id) IN (
            SELECT n.aggregate_type, n.aggregate_id FROM next_up n WHERE n.seq IS NOT NULL)`;

/**
 * An orphan whose lost lease held at most this many rows is isolated alone
 * (a suspect); a larger lease's orphans are reclaimed in halves. See "Fault
 * isolation" in claim-batch.ts.
 */
const SMALL_LEASE = 8;

/**
 * What both claims' `picked` carry of a row besides its place: its size for
 * the byte budget and its lost lease (see "Fault isolation" in claim-batch.ts).
 * The size is what the producer wrote (payload_bytes), else the text's
 * length: the stored size may be a fraction of it (TOAST compresses), and
 * what the relay holds is the text. Only rows written without payload_bytes
 * (before it existed, or by other tools) pay for the conversion.
 */
export const SIZE_AND_LEASE = (e: string) =>
  `coalesce(${e}.payload_bytes, octet_length(${e}.payload::text))::bigint AS bytes, ${e}.locked_by IS NOT NULL AS orphan,
           ${e}.claimed_alone OR ${e}.claimed_with <= ${SMALL_LEASE} AS small, ${e}.claimed_with AS lost_size`;
