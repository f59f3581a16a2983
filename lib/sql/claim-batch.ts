import { type Queryable, queryPrepared } from '../db/queryable.js';
import { type OutboxTables, perSchema } from '../db/schema.js';
import type { OutboxEvent } from '../outbox/types.js';
import { MORE_BEHIND, orderedParking, orderedPicked, SIZE_AND_LEASE } from './claim-ordered.js';

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
  /** Ordered mode only: `RelayOptions.deadLetterPolicy`. Default `block`. */
  deadLetterPolicy?: 'block' | 'skip';
  /** Ordered mode only: most events of one aggregate per claim (`RelayOptions.maxPerAggregate`). Default 1. */
  perAggregate?: number;
  /**
   * Unordered mode only: look at rows from this seq up (the relay's seq
   * floor, BatchPipeline.seqFloor): the index scan starts there instead of
   * stepping over every entry of rows published since the oldest open
   * snapshot ("Long transactions and the outbox" in docs/operations.md).
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
  /** Another batch of the claiming relay is in flight: a claim of one row is not alone ("Fault isolation" below). */
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
  /**
   * Ordered: the events (each the last this claim took of its aggregate)
   * with more of their aggregate right behind. Once such an event is
   * published, its successor's park, if any, is cleared (unparkNext).
   */
  runEnds: OutboxEvent[];
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
//   (the relay died, timed out, or could not record the outcome). An orphan
//   is not known to be at fault while its lost lease held others too: that
//   lease is not counted (attempts stay as they were). What the claim does
//   with orphans among the rows it would take depends on how many rows the
//   lost lease held (`claimed_with`, written by every claim):
//   - at most SMALL_LEASE (8) rows, or alone: it takes only the earliest such
//     orphan, alone (`suspect`), and leaves the rest for the next claims. An
//     orphan whose lost lease held it alone killed the relay by itself: that
//     lease counts, and once its attempts are used up the claim dead-letters
//     it instead of looping forever. "Alone" means alone in the process: a
//     claim of one row while the same relay has another batch in flight
//     (`othersInFlight`) is not alone, since a crash takes both; the relay
//     isolates a suspect in its process (no other batch in flight while it
//     publishes) and then marks it alone (`markClaimedAlone`).
//   - more: it takes a batch again, but of at most half as many rows as the
//     smallest lost lease among them held (a prefix in claim order), not a
//     suspect. If that batch is lost too, its rows' leases held half as many:
//     a row that keeps killing the relay is in a lease half as large at each
//     loss until it is isolated alone as above, while rows whose lease was
//     lost for another reason (the outcome could not be recorded: a database
//     blip) go out in batches instead of one per round trip, with the relay
//     claiming nothing else meanwhile (400 such orphans and 2,000 new events
//     took 420 batches and 14 s through a 20 ms target; 28 batches now). A
//     crash costs log2(rows / 8) extra losses at most; leases of up to 8 rows
//     are isolated at once, which costs at most 8 round trips.
//   So a poison row ends in dead letters alone, its neighbours are published
//   and spend nothing.
// - Every other claim counts as an attempt (an outcome that blames the
//   environment gives it back, see complete-batch.ts).
// - Ordered mode (per-aggregate ordering) is its own statement:
//   claim-ordered.ts says how it finds heads cheaply whatever the table holds.
const unorderedPicked = (t: OutboxTables, fromSeq: boolean) => `
WITH picked AS (
  SELECT e.id, e.seq, true AS head, e.seq AS ord, ${SIZE_AND_LEASE('e')}
  FROM ${t.events} e
  WHERE e.processed_at IS NULL
    AND e.dead_lettered_at IS NULL
    AND (e.locked_until IS NULL OR e.locked_until < now())
    AND (e.retry_after IS NULL OR e.retry_after <= now() OR e.retry_after = e.parked_until)${fromSeq ? '\n    AND e.seq >= $5::bigint' : ''}
  ORDER BY e.seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)`;

// The tail shared by both modes: `picked` (id, seq, orphan, small,
// lost_size, head, ord, bytes) is what the claim would take, in claim order
// (ord, seq): seq, or in ordered mode each run after the one before (head
// seq), so that cutting it anywhere leaves whole runs and a prefix of one.
// `budgeted` cuts it where the bytes before a row reach the budget (the first
// row always stays). Rows locked but cut are released at commit, untouched.
// With an orphan of a small lease among the heads, only the earliest one is
// taken; with orphans of larger leases, at most half the smallest of those
// leases (see "Fault isolation" above). `after` holds the ordered claim's
// parking CTEs, which read `taken`. In the SET list, `e` is the row as it
// was before this claim: `e.locked_by IS NOT NULL` is "orphan" and
// `e.claimed_alone` says whether its lost lease held it alone; a row taken
// while parked (retry_after = parked_until, see claim-ordered.ts) is parked
// no more. A park only keeps an aggregate in order: the unordered claim
// (a relay switched to ordering 'none') takes parked rows as they are.
function claimSql(
  t: OutboxTables,
  picked: string,
  budget: string,
  othersInFlight: string,
  after = '',
  moreBehind = 'false',
): string {
  const spent = `e.locked_by IS NOT NULL AND e.claimed_alone AND e.attempts >= $4`;
  return `${picked},
budgeted AS (
  SELECT b.id, b.seq, b.orphan, b.small, b.lost_size, b.head, b.n
  FROM (
    SELECT p.*,
           coalesce(sum(p.bytes) OVER (ORDER BY p.ord, p.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
             AS bytes_before,
           row_number() OVER (ORDER BY p.ord, p.seq) AS n
    FROM picked p) b
  WHERE b.n = 1 OR b.bytes_before < ${budget}::bigint
),
suspect AS (
  SELECT p.id FROM budgeted p WHERE p.orphan AND p.small AND p.head ORDER BY p.seq LIMIT 1
),
taken AS (
  SELECT s.id FROM suspect s
  UNION ALL
  SELECT p.id FROM budgeted p
  WHERE NOT EXISTS (SELECT 1 FROM suspect)
    AND p.n <= coalesce((SELECT min(o.lost_size) / 2 FROM budgeted o WHERE o.orphan), p.n)
),
size AS (SELECT count(*) AS n FROM taken)${after ? `,${after}` : ''}
UPDATE ${t.events} e
SET attempts = CASE WHEN ${spent} THEN e.attempts
                    WHEN e.locked_by IS NOT NULL AND NOT e.claimed_alone THEN e.attempts
                    ELSE e.attempts + 1 END,
    locked_until = CASE WHEN ${spent} THEN NULL ELSE now() + $2 * interval '1 millisecond' END,
    locked_by = CASE WHEN ${spent} THEN NULL ELSE $3::uuid END,
    claimed_alone = (SELECT n FROM size) = 1 AND NOT ${othersInFlight}::boolean,
    claimed_with = (SELECT n FROM size),
    retry_after = CASE WHEN e.retry_after = e.parked_until THEN NULL ELSE e.retry_after END,
    parked_until = NULL,
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
          e.replay_id, e.replayed_at, e.failing_since, EXISTS (SELECT 1 FROM suspect) AS suspect,
          ${moreBehind} AS more_behind`;
}

// $1 limit, $2 lease ms, $3 lease id, $4 max attempts, $5 the ordered
// claim's perAggregate or the unordered claim's fromSeq; then the byte budget
// and othersInFlight.
const claimStatements = perSchema((t) => ({
  unordered: claimSql(t, unorderedPicked(t, false), '$5', '$6'),
  unorderedFrom: claimSql(t, unorderedPicked(t, true), '$6', '$7'),
  block: claimSql(t, orderedPicked(t, 'block'), '$6', '$7', orderedParking(t), MORE_BEHIND),
  skip: claimSql(t, orderedPicked(t, 'skip'), '$6', '$7', orderedParking(t), MORE_BEHIND),
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
  more_behind: boolean;
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

const texts = new Map<string, string>();

/**
 * The claim's text with its limits written in ($1 and the ordered claim's $5
 * become numbers, the other parameters are renumbered from $1): a prepared
 * statement's generic plan then knows how many rows each part reads, as a
 * custom plan does, instead of guessing a tenth of the table.
 */
function claimText(
  schema: string | undefined,
  kind: keyof ReturnType<typeof claimStatements>,
  limit: number,
  perAggregate: number | undefined,
): string {
  const key = `${schema ?? ''}|${kind}|${limit}|${perAggregate ?? ''}`;
  let text = texts.get(key);
  if (text === undefined) {
    const literal: Record<number, number | undefined> = { 1: limit, 5: perAggregate };
    const renumbered = new Map<number, number>();
    text = claimStatements(schema)[kind].replace(/\$(\d+)/g, (_, n: string) => {
      const old = Number(n);
      const value = literal[old];
      if (value !== undefined) return String(value);
      if (!renumbered.has(old)) renumbered.set(old, old - (old > 5 && perAggregate !== undefined ? 2 : 1));
      return `$${renumbered.get(old)}`;
    });
    texts.set(key, text);
  }
  return text;
}

/** Claims up to `limit` publishable rows under a new lease; see the comment above for the rules. */
export async function claimBatch(db: Queryable, params: ClaimParams): Promise<ClaimResult> {
  const from = !params.ordered && params.fromSeq !== undefined;
  const kind = params.ordered ? (params.deadLetterPolicy ?? 'block') : from ? 'unorderedFrom' : 'unordered';
  const limit = Math.max(1, Math.floor(params.limit));
  const perAggregate = params.ordered ? Math.max(1, Math.min(params.perAggregate ?? 1, limit)) : undefined;
  const sql = claimText(params.schema, kind, limit, perAggregate);
  const values: unknown[] = [params.leaseMs, params.leaseId, params.maxAttempts];
  if (from) values.push(params.fromSeq);
  // Absent: a budget nothing reaches (bigint's largest value).
  values.push(
    params.maxBytes === undefined ? '9223372036854775807' : String(Math.max(0, Math.floor(params.maxBytes))),
  );
  values.push(params.othersInFlight === true);
  const { rows } = await queryPrepared<Row>(db, sql, values);
  const result: ClaimResult = { events: [], exhausted: [], suspect: false, runEnds: [] };
  // UPDATE ... RETURNING gives no order guarantee; publish in seq order.
  rows.sort((a, b) => compareSeq(a.seq, b.seq));
  if (rows.length > 0) result.minSeq = rows[0]?.seq;
  // In seq order, the last event of a flagged aggregate ends its run.
  const lastOfRun = new Map<string, OutboxEvent>();
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
      if (row.more_behind)
        lastOfRun.set(`${row.aggregate_type}\u0000${row.aggregate_id}`, result.events.at(-1)!);
    }
  }
  result.runEnds = [...lastOfRun.values()];
  // A suspect dead-lettered by this claim (its attempts were used up) is not in flight.
  result.suspect = result.events.length > 0 && rows.some((r) => r.suspect);
  return result;
}

const markAloneStatements = perSchema(
  (t) => `UPDATE ${t.events} SET claimed_alone = true
          WHERE id = $1 AND locked_by = $2::uuid AND locked_until > now() AND processed_at IS NULL`,
);

/**
 * Marks a suspect claimed beside other batches as claimed alone, once they
 * have ended ("Fault isolation" above). False when the lease has run out
 * meanwhile (the row is not the caller's any more: do not publish it).
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
