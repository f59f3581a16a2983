import type { Queryable } from '../db/queryable.js';
import { perSchema } from '../db/schema.js';
import { deadLetterOf } from '../sql/list-dead-letters.js';
import { LIST_ERROR_CHARS } from './queries.js';

/** Newest dead letters grouped by cause (and searched by group). */
export const DEAD_LETTER_GROUP_CAP = 10_000;

/** Dead letters of one cause among the newest {@link DEAD_LETTER_GROUP_CAP}. */
export interface DeadLetterGroup {
  /** Stable id of the cause, for `?group=` and a group's redrive or discard. */
  id: string;
  eventType: string;
  /** The target the error names (`sqs:<queue url>`, `eventbridge:<bus>`), or null when it names none. */
  target: string | null;
  /** The error's kind: its text up to the first ':', numbers as `N` (`SQS config error`). */
  errorClass: string;
  count: number;
  oldestDeadLetteredAt: Date;
  newestDeadLetteredAt: Date;
  /** One error text of the group, cut to 200 characters. */
  example: string;
}

// The cause of a dead letter, computed in SQL so that the grouping, a
// group's rows and its ids all read the capped set once, in the database:
// 1. The relay's verdicts wrap the publisher's error ("attempt limit (5)
//    reached; last error: <error>", "failing for reasons of the environment
//    for longer than …; last error: <error>"): the cause is the inner error.
// 2. A router error about one of several targets starts with the target's
//    key (`sqs:<url>: …`, `eventbridge:<bus>: …`): that is the target.
// 3. The error class is the rest up to the first ':', digits as N (sizes,
//    attempt counts), at most 120 characters.
// String functions rather than regular expressions where they do (PostgreSQL's
// regex engine cost ~50 ms on 10,000 rows), and each step MATERIALIZED: an
// inlined CTE repeats its expression wherever the next one uses it. The
// group's id (a hash of its cause) is computed per group, not per row.
// The newest dead letters come from outbox_events_dead_lettered_at, backwards.
const CAUSES = (events: string) => `
  d AS MATERIALIZED (
    SELECT n.*,
           CASE WHEN (starts_with(n.e, 'attempt limit (') OR starts_with(n.e, 'failing for reasons of the environment'))
                     AND strpos(n.e, '; last error: ') > 0
                THEN substr(n.e, strpos(n.e, '; last error: ') + 14) ELSE n.e END AS err
    FROM (SELECT id, seq, event_type, aggregate_type, aggregate_id, attempts, created_at, dead_lettered_at,
                 redrive_count, redriven_at, left(last_error, ${LIST_ERROR_CHARS}) AS last_error,
                 coalesce(left(last_error, ${LIST_ERROR_CHARS}), '') AS e
          FROM ${events}
          WHERE dead_lettered_at IS NOT NULL
          ORDER BY dead_lettered_at DESC
          LIMIT ${DEAD_LETTER_GROUP_CAP}) n),
  t AS MATERIALIZED (
    SELECT d.*, CASE WHEN (starts_with(err, 'sqs:') OR starts_with(err, 'eventbridge:')) AND strpos(err, ': ') > 0
                     THEN left(err, strpos(err, ': ') - 1) END AS target
    FROM d),
  c AS MATERIALIZED (
    SELECT t.*, coalesce(nullif(left(regexp_replace(trim(split_part(
             CASE WHEN target IS NULL THEN err ELSE substr(err, length(target) + 3) END, ':', 1)),
             '[0-9]+', 'N', 'g'), 120), ''), '(no error recorded)') AS error_class
    FROM t),
  g AS (
    SELECT event_type, target, error_class, count(*)::int AS n,
           min(dead_lettered_at) AS oldest, max(dead_lettered_at) AS newest,
           left((array_agg(last_error))[1], 200) AS example,
           left(md5(event_type || chr(31) || coalesce(target, '') || chr(31) || error_class), 16) AS group_id
    FROM c GROUP BY event_type, target, error_class)`;

// A group's rows: those whose cause is the group's.
const OF_GROUP = `
  FROM c JOIN g ON g.event_type = c.event_type AND g.error_class = c.error_class
                AND g.target IS NOT DISTINCT FROM c.target
  WHERE g.group_id = $1`;

const sql = perSchema((t) => ({
  GROUPS: `
    WITH ${CAUSES(t.events)}
    SELECT g.*, (SELECT count(*) FROM d)::int AS scanned FROM g ORDER BY n DESC, group_id`,
  ROWS: `
    WITH ${CAUSES(t.events)}
    SELECT c.*, g.n AS total ${OF_GROUP} ORDER BY c.seq LIMIT $2`,
  IDS: `
    WITH ${CAUSES(t.events)}
    SELECT coalesce(array_agg(c.id ORDER BY c.seq), '{}') AS ids ${OF_GROUP}`,
}));

export interface DeadLetterGroups {
  /** Dead letters grouped (the newest, at most {@link DEAD_LETTER_GROUP_CAP}). */
  scanned: number;
  /** True when there may be older dead letters than were grouped. */
  capped: boolean;
  groups: DeadLetterGroup[];
}

/** The newest dead letters grouped by cause, largest group first. */
export async function deadLetterGroups(db: Queryable, schema: string | undefined): Promise<DeadLetterGroups> {
  const { rows } = await db.query(sql(schema).GROUPS);
  const scanned: number = rows[0]?.scanned ?? 0;
  return {
    scanned,
    capped: scanned >= DEAD_LETTER_GROUP_CAP,
    groups: rows.map((r) => ({
      id: r.group_id,
      eventType: r.event_type,
      target: r.target,
      errorClass: r.error_class,
      count: r.n,
      oldestDeadLetteredAt: r.oldest,
      newestDeadLetteredAt: r.newest,
      example: r.example ?? '',
    })),
  };
}

/** The first `limit` dead letters of a group (seq order: the order a redrive takes them in), and how many it has. */
export async function deadLettersOfGroup(
  db: Queryable,
  group: string,
  options: { schema: string | undefined; limit: number },
) {
  const { rows } = await db.query(sql(options.schema).ROWS, [group, options.limit]);
  return {
    group,
    total: rows[0]?.total ?? 0,
    totalCapped: false,
    rows: rows.map(deadLetterOf),
  };
}

/** Every id of a group (at most {@link DEAD_LETTER_GROUP_CAP}), in seq order. */
export async function idsOfGroup(
  db: Queryable,
  group: string,
  schema: string | undefined,
): Promise<string[]> {
  const { rows } = await db.query(sql(schema).IDS, [group]);
  return rows[0]?.ids ?? [];
}
