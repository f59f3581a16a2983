import type { Queryable } from '../db/queryable.js';
import { perSchema } from '../db/schema.js';

// The console's own reads. Each is bounded by an index and a LIMIT (or a
// per-bucket cap), so its cost follows what it shows, not the table's size.
// They belong in lib/sql once the console's shape settles.

/** Most rows one per-minute bucket counts before it reports "this many or more". */
export const MINUTE_BUCKET_CAP = 5_000;
/** Backing-off events read to tell which targets events wait for. */
export const WAITING_SCAN_CAP = 10_000;
/** Newest finished events searched for an aggregate's published history (no index covers it). */
export const TIMELINE_FINISHED_SCAN = 50_000;
/** Characters of `last_error` kept in lists (the event's detail has it whole). */
export const LIST_ERROR_CHARS = 500;

/** An event's state as the console names it, from its columns at the database's now(). */
const STATE = `CASE
  WHEN discarded_at IS NOT NULL THEN 'discarded'
  WHEN processed_at IS NOT NULL THEN 'published'
  WHEN dead_lettered_at IS NOT NULL THEN 'dead-letter'
  WHEN locked_until >= now() THEN 'leased'
  WHEN retry_after > now() AND retry_after = parked_until THEN 'parked'
  WHEN retry_after > now() THEN 'backing-off'
  ELSE 'pending' END`;

const TIMELINE_COLUMNS = `id, seq, event_type, attempts, created_at, processed_at, dead_lettered_at,
  discarded_at, redrive_count, replay_count, left(last_error, ${LIST_ERROR_CHARS}) AS last_error, ${STATE} AS state`;

/** A bucket's first and last $3 rows by `col` (aliases `<p>a`, `<p>z`; the last only read when the first filled up). */
const ENDS = (events: string, col: string, extra: string, p: string) => {
  const rows = (order: string, only = '') => `
    SELECT ${col} FROM ${events}
    WHERE ${col} >= b AND ${col} < b + make_interval(secs => $1)${extra}${only}
    ORDER BY ${col} ${order} LIMIT $3`;
  return `
    CROSS JOIN LATERAL (
      SELECT count(*)::int AS n, min(${col}) AS first_at, max(${col}) AS last_at FROM (${rows('ASC')}) x) ${p}a
    CROSS JOIN LATERAL (
      SELECT min(${col}) AS first_at, max(${col}) AS last_at,
             count(*) FILTER (WHERE ${col} > ${p}a.last_at)::int AS beyond
      FROM (${rows('DESC', ` AND ${p}a.n >= $3`)}) x) ${p}z`;
};

const sql = perSchema((t) => ({
  // Published (processed_at, discards excepted) and dead-lettered events per
  // bucket ($1 seconds, the $2 buckets up to now). Each bucket is a range of
  // the partial indexes outbox_events_processed_at and
  // outbox_events_dead_lettered_at, read from both ends, $3 rows each: a
  // bucket with fewer than 2 × $3 rows is counted exactly, a fuller one is
  // the rows read plus the gap between the two ends at their pace (see
  // throughput()). Dead-lettered counts rows still dead: a redriven or
  // discarded one has left the index. Failed attempts that will be retried
  // leave no timestamp, so they are not in the series.
  THROUGHPUT: `
    SELECT b AS start,
           pa.n AS p_n, pa.first_at AS p_a0, pa.last_at AS p_a1, pz.first_at AS p_z0, pz.last_at AS p_z1, pz.beyond AS p_beyond,
           da.n AS d_n, da.first_at AS d_a0, da.last_at AS d_a1, dz.first_at AS d_z0, dz.last_at AS d_z1, dz.beyond AS d_beyond
    FROM generate_series(to_timestamp(floor(extract(epoch FROM now()) / $1) * $1) - ($2 - 1) * make_interval(secs => $1),
                         to_timestamp(floor(extract(epoch FROM now()) / $1) * $1), make_interval(secs => $1)) b
    ${ENDS(t.events, 'processed_at', ' AND discarded_at IS NULL', 'p')}
    ${ENDS(t.events, 'dead_lettered_at', '', 'd')}
    ORDER BY b`,
  // Targets the backing-off events wait for (the relay records them when a
  // target is unavailable), read from outbox_events_retry_own up to the cap.
  WAITING: `
    WITH r AS MATERIALIZED (
      SELECT waiting_for, retry_after FROM ${t.events}
      WHERE retry_after IS NOT NULL AND retry_after IS DISTINCT FROM parked_until
        AND processed_at IS NULL AND dead_lettered_at IS NULL
      LIMIT $1)
    SELECT (SELECT count(*) FROM r)::int AS scanned,
           coalesce((SELECT json_agg(json_build_object('target', target, 'events', events, 'nextTryAt', next_try))
                     FROM (SELECT target, count(*)::int AS events, min(retry_after) AS next_try
                           FROM r, unnest(r.waiting_for) AS target
                           GROUP BY target ORDER BY events DESC, target LIMIT 100) w), '[]') AS targets`,
  EVENT: `
    SELECT id, seq, event_type, aggregate_type, aggregate_id, headers, attempts, last_error,
           created_at, retry_after, locked_until, processed_at, first_processed_at, dead_lettered_at,
           redrive_count, redriven_at, discarded_at, discarded_by, replay_id, replayed_at, replay_count,
           delivered_targets, waiting_for, payload_bytes, ${STATE} AS state
    FROM ${t.events} WHERE id = $1`,
  PAYLOAD: `SELECT payload::text AS payload FROM ${t.events} WHERE id = $1`,
  // An aggregate's events: unfinished ones (outbox_events_unfinished_by_aggregate)
  // and dead letters (outbox_events_dead_letters_by_aggregate) in full, up to
  // the limit; finished ones only among the newest finished events
  // (outbox_events_processed_at), since no index covers an aggregate's history.
  TIMELINE: `
    SELECT * FROM (
      (SELECT ${TIMELINE_COLUMNS} FROM ${t.events}
       WHERE aggregate_type = $1 AND aggregate_id = $2 AND processed_at IS NULL AND dead_lettered_at IS NULL
       ORDER BY seq LIMIT $3)
      UNION ALL
      (SELECT ${TIMELINE_COLUMNS} FROM ${t.events}
       WHERE aggregate_type = $1 AND aggregate_id = $2 AND dead_lettered_at IS NOT NULL
       ORDER BY seq LIMIT $3)
      UNION ALL
      (SELECT ${TIMELINE_COLUMNS}
       FROM (SELECT * FROM ${t.events} WHERE processed_at IS NOT NULL ORDER BY processed_at DESC LIMIT $4) f
       WHERE aggregate_type = $1 AND aggregate_id = $2
       ORDER BY seq DESC LIMIT $3)
    ) e
    ORDER BY seq
    LIMIT $3`,
}));

/** Events in one bucket of a throughput series. */
export interface BucketCounts {
  start: Date;
  published: number;
  deadLettered: number;
  /** True when a count reached the cap and is extrapolated from the part of the bucket read. */
  estimated: boolean;
}

/** A series' shape: `buckets` buckets of `bucketSeconds`, the last one holding now; counted exactly up to `cap` a bucket. */
export interface ThroughputWindow {
  bucketSeconds: number;
  buckets: number;
  cap: number;
}

/** The last hour by minute: counted exactly up to 5,000 events a minute. */
export const LAST_HOUR: ThroughputWindow = { bucketSeconds: 60, buckets: 60, cap: MINUTE_BUCKET_CAP };
/** The last day by 15 minutes: counted exactly up to 500 events a quarter hour, estimated beyond. */
export const LAST_DAY: ThroughputWindow = { bucketSeconds: 900, buckets: 96, cap: 500 };

type Ends = { n: number; a0: Date; a1: Date; z0: Date; z1: Date; beyond: number };

/**
 * How many rows a bucket holds, from `per` rows read at each end: all of
 * them when the first end read fewer than `per`; when the two ends overlap,
 * the first end and what the last one read beyond it (exact); otherwise
 * both ends and the gap between them at the ends' average pace (an
 * estimate, which assumes an even pace between the two ends).
 */
function bucketCount(e: Ends, per: number): { count: number; estimated: boolean } {
  if (e.n < per) return { count: e.n, estimated: false };
  if (e.beyond < per) return { count: per + e.beyond, estimated: false };
  const ms = (from: Date, to: Date) => Math.max(to.getTime() - from.getTime(), 1);
  const pace = (2 * per) / (ms(e.a0, e.a1) + ms(e.z0, e.z1));
  return { count: Math.round(2 * per + pace * (e.z0.getTime() - e.a1.getTime())), estimated: true };
}

/**
 * Published and dead-lettered events per bucket, oldest first. Counting a
 * whole day of a busy outbox would cost as much as the day had events, so
 * each bucket is read at both ends only (see {@link bucketCount}): the cost
 * is bounded by the window's shape, whatever the traffic.
 */
export async function throughput(
  db: Queryable,
  schema: string | undefined,
  window: ThroughputWindow,
): Promise<BucketCounts[]> {
  const per = Math.ceil(window.cap / 2);
  const { rows } = await db.query(sql(schema).THROUGHPUT, [window.bucketSeconds, window.buckets, per]);
  const ends = (r: Record<string, unknown>, p: 'p' | 'd') =>
    ({
      n: r[`${p}_n`],
      a0: r[`${p}_a0`],
      a1: r[`${p}_a1`],
      z0: r[`${p}_z0`],
      z1: r[`${p}_z1`],
      beyond: r[`${p}_beyond`],
    }) as Ends;
  return rows.map((r) => {
    const published = bucketCount(ends(r, 'p'), per);
    const dead = bucketCount(ends(r, 'd'), per);
    return {
      start: r.start,
      published: published.count,
      deadLettered: dead.count,
      estimated: published.estimated || dead.estimated,
    };
  });
}

export interface WaitingTargets {
  /** Backing-off events read (at most {@link WAITING_SCAN_CAP}). */
  scanned: number;
  /** True when there were more backing-off events than were read. */
  capped: boolean;
  /** Each target named by waiting events: how many, and the earliest time one of them is due again. */
  targets: Array<{ target: string; events: number; nextTryAt: string }>;
}

/** How many backing-off events wait for each target (among the first {@link WAITING_SCAN_CAP}). */
export async function waitingTargets(db: Queryable, schema: string | undefined): Promise<WaitingTargets> {
  const { rows } = await db.query(sql(schema).WAITING, [WAITING_SCAN_CAP]);
  const scanned: number = rows[0].scanned;
  return { scanned, capped: scanned >= WAITING_SCAN_CAP, targets: rows[0].targets };
}

/** One event as the console shows it; `payload` (its JSON text) only when asked for. */
export async function eventDetail(
  db: Queryable,
  id: string,
  options: { schema: string | undefined; withPayload: boolean },
): Promise<Record<string, unknown> | undefined> {
  const { rows } = await db.query(sql(options.schema).EVENT, [id]);
  const r = rows[0];
  if (!r) return undefined;
  const detail: Record<string, unknown> = {
    id: r.id,
    seq: r.seq,
    state: r.state,
    eventType: r.event_type,
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    headers: r.headers,
    attempts: r.attempts,
    lastError: r.last_error,
    createdAt: r.created_at,
    retryAfter: r.retry_after,
    lockedUntil: r.locked_until,
    processedAt: r.processed_at,
    firstProcessedAt: r.first_processed_at,
    deadLetteredAt: r.dead_lettered_at,
    redriveCount: r.redrive_count,
    redrivenAt: r.redriven_at,
    discardedAt: r.discarded_at,
    discardedBy: r.discarded_by,
    replayId: r.replay_id,
    replayedAt: r.replayed_at,
    replayCount: r.replay_count,
    deliveredTargets: r.delivered_targets,
    waitingFor: r.waiting_for,
    payloadBytes: r.payload_bytes,
  };
  if (options.withPayload) {
    // As text: the stored JSON exactly (no rounding of big numbers on the way).
    const payload = await db.query(sql(options.schema).PAYLOAD, [id]);
    detail.payload = payload.rows[0]?.payload ?? null;
  }
  return detail;
}

export interface TimelineEvent {
  id: string;
  seq: string;
  eventType: string;
  state: string;
  attempts: number;
  createdAt: Date;
  processedAt: Date | null;
  deadLetteredAt: Date | null;
  discardedAt: Date | null;
  redriveCount: number;
  replayCount: number;
  lastError: string | null;
}

/** An aggregate's events in seq order (see TIMELINE above for what is searched). */
export async function aggregateTimeline(
  db: Queryable,
  aggregate: { type: string; id: string },
  options: { schema: string | undefined; limit: number },
): Promise<TimelineEvent[]> {
  const { rows } = await db.query(sql(options.schema).TIMELINE, [
    aggregate.type,
    aggregate.id,
    options.limit,
    TIMELINE_FINISHED_SCAN,
  ]);
  return rows.map((r) => ({
    id: r.id,
    seq: r.seq,
    eventType: r.event_type,
    state: r.state,
    attempts: r.attempts,
    createdAt: r.created_at,
    processedAt: r.processed_at,
    deadLetteredAt: r.dead_lettered_at,
    discardedAt: r.discarded_at,
    redriveCount: r.redrive_count,
    replayCount: r.replay_count,
    lastError: r.last_error,
  }));
}
