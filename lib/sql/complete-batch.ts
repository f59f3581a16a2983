import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';

/** The decided fate of one claimed event. */
export type Completion =
  | { id: string; status: 'published'; delivered: string[] }
  | {
      id: string;
      status: 'retry';
      error: string;
      delayMs: number;
      delivered: string[];
      /** Give back the attempt the claim counted: the failure was the environment's. */
      refund: boolean;
      /**
       * A failure of the environment: starts the event's `failing_since`
       * (if not already running), from which its maximum pending age counts.
       */
      failing?: boolean | undefined;
      /** Targets the event waits for; a recovered target releases it early. */
      waitingFor?: string[] | undefined;
      /**
       * Held back behind an earlier event of its aggregate that retries in
       * this long: parked until then (claim-ordered.ts, "Parking").
       */
      parkMs?: number | undefined;
    }
  | { id: string; status: 'dead'; error: string; delivered: string[] };

// One set-based statement for the whole batch, whatever the mix of outcomes.
// The outcomes travel as one jsonb array (jsonb_to_recordset turns it into
// rows), which keeps the statement text fixed for any batch size.
// `locked_by = $2` is the lease check: if our lease expired and another relay
// claimed the row since, the row is theirs and this statement leaves it alone.
// Times come from the database clock (now()), like the claim's, so relays with
// skewed clocks agree on leases and backoff.
// A refunded retry gives back the attempt the claim counted: an outage is
// not the event's fault (the claim still counts a lease that expires with no
// outcome, so a relay that keeps crashing on an event dead-letters it).
// The outcome columns of a row that is kept: published (unless published
// rows are deleted), retried or dead-lettered. An event held back behind an
// earlier one of its aggregate spends no wait of its own: behind an event
// that retries it is parked until that one is due (retry_after =
// parked_until, as the ordered claim parks what it finds in its way), so it
// leaves the rows the claim looks through (outbox_events_ready and the due
// retries) and a claim finds other aggregates' events without reading past
// it; a claim of its aggregate's run still takes it. Otherwise it gets no
// retry_after at all: as claimable as a new row.
const OUTCOME_SET = `
SET processed_at = CASE WHEN o.status = 'published' THEN now() END,
    attempts = CASE WHEN o.status = 'retry' AND o.refund THEN greatest(e.attempts - 1, 0) ELSE e.attempts END,
    failing_since = CASE WHEN o.status = 'retry' AND o.failing THEN coalesce(e.failing_since, now())
                         ELSE e.failing_since END,
    waiting_for = CASE WHEN o.status = 'retry' THEN o.waiting_for END,
    dead_lettered_at = CASE WHEN o.status = 'dead' THEN now() END,
    retry_after = CASE WHEN o.status = 'retry' AND greatest(o.delay_ms, o.park_ms) > 0
                       THEN now() + greatest(o.delay_ms, o.park_ms) * interval '1 millisecond' END,
    parked_until = CASE WHEN o.status = 'retry' AND o.delay_ms = 0 AND o.park_ms > 0
                        THEN now() + o.park_ms * interval '1 millisecond' END,
    last_error = CASE WHEN o.status = 'published' THEN e.last_error ELSE o.error END,
    delivered_targets = CASE WHEN o.status = 'published' THEN '{}'::text[] ELSE o.delivered END,
    locked_until = NULL,
    locked_by = NULL`;

const OUTCOMES = `jsonb_to_recordset($1::jsonb)
  AS o(id uuid, status text, error text, delay_ms bigint, park_ms bigint, delivered text[], refund boolean,
       waiting_for text[], failing boolean)`;

const COMPLETE = (t: OutboxTables) => `
UPDATE ${t.events} e
${OUTCOME_SET}
FROM ${OUTCOMES}
WHERE e.id = o.id
  AND e.locked_by = $2::uuid
RETURNING e.id`;

// publishedRows 'delete': published rows go, the others are updated as above.
// Two data-modifying CTEs on disjoint rows of one table, in one statement.
const COMPLETE_DELETING_PUBLISHED = (t: OutboxTables) => `
WITH o AS (SELECT * FROM ${OUTCOMES}),
gone AS (
  DELETE FROM ${t.events} e
  USING o
  WHERE e.id = o.id AND o.status = 'published'
    AND e.locked_by = $2::uuid
  RETURNING e.id),
kept AS (
  UPDATE ${t.events} e
  ${OUTCOME_SET}
  FROM o
  WHERE e.id = o.id AND o.status <> 'published'
    AND e.locked_by = $2::uuid
  RETURNING e.id)
SELECT id FROM gone
UNION ALL
SELECT id FROM kept`;

// The common case, every event of the batch published, as a plain id list:
// cheaper for the database than building rows from JSON. Deleted, a
// published row finishes with no trace: no new row version, no index
// entries, nothing left for cleanup (docs/operations.md, "Published rows").
const LEASED_IDS = `WHERE id = ANY($1::uuid[]) AND locked_by = $2::uuid
RETURNING id`;
const COMPLETE_ALL_PUBLISHED = (t: OutboxTables) => `
UPDATE ${t.events}
SET processed_at = now(), delivered_targets = '{}'::text[], waiting_for = NULL,
    locked_until = NULL, locked_by = NULL
${LEASED_IDS}`;
const DELETE_ALL_PUBLISHED = (t: OutboxTables) => `DELETE FROM ${t.events} ${LEASED_IDS}`;

/**
 * Records the outcomes of a claimed batch, only for rows still leased to
 * `leaseId`. Returns the ids it recorded; a missing id means the lease was
 * lost (expired and taken over), and the other relay now owns the outcome.
 */
export async function completeBatch(
  db: Queryable,
  leaseId: string,
  completions: readonly Completion[],
  publishedRows: 'keep' | 'delete' = 'keep',
  schema?: string,
): Promise<Set<string>> {
  if (completions.length === 0) return new Set();
  const t = outboxTables(schema);
  const deletePublished = publishedRows === 'delete';
  if (completions.every((c) => c.status === 'published')) {
    const { rows } = await db.query<{ id: string }>(
      (deletePublished ? DELETE_ALL_PUBLISHED : COMPLETE_ALL_PUBLISHED)(t),
      [completions.map((c) => c.id), leaseId],
    );
    return new Set(rows.map((r) => r.id));
  }
  const payload = completions.map((c) => ({
    id: c.id,
    status: c.status,
    error: c.status === 'published' ? null : c.error,
    delay_ms: c.status === 'retry' ? Math.round(c.delayMs) : null,
    park_ms: c.status === 'retry' && c.parkMs ? Math.round(c.parkMs) : null,
    delivered: c.delivered,
    refund: c.status === 'retry' && c.refund,
    failing: c.status === 'retry' && c.failing === true,
    waiting_for: c.status === 'retry' && c.waitingFor?.length ? c.waitingFor : null,
  }));
  const { rows } = await db.query<{ id: string }>(
    (deletePublished ? COMPLETE_DELETING_PUBLISHED : COMPLETE)(t),
    [JSON.stringify(payload), leaseId],
  );
  return new Set(rows.map((r) => r.id));
}

const UNPARK_NEXT = (t: OutboxTables) => `
UPDATE ${t.events} e
SET retry_after = NULL, parked_until = NULL
FROM jsonb_to_recordset($1::jsonb) AS a(type text, id text, seq bigint)
CROSS JOIN LATERAL (
  SELECT n.ctid FROM ${t.events} n
  WHERE num_nulls(n.processed_at, n.dead_lettered_at) = 2
    AND n.aggregate_type = a.type AND n.aggregate_id = a.id AND n.seq > a.seq
  ORDER BY n.aggregate_type, n.aggregate_id, n.seq
  LIMIT 1) n
WHERE e.ctid = n.ctid AND e.retry_after = e.parked_until`;

/**
 * Clears the park of the next event of each aggregate after `published`
 * (the last published event of its run), if it is still parked: it is the
 * aggregate's head now, and a parked head is claimed only when its park
 * ends (ClaimResult.runEnds says which runs to give).
 */
export async function unparkNext(
  db: Queryable,
  published: ReadonlyArray<{ aggregateType: string; aggregateId: string; seq: string }>,
  schema?: string,
): Promise<void> {
  if (published.length === 0) return;
  const after = published.map((e) => ({ type: e.aggregateType, id: e.aggregateId, seq: e.seq }));
  await db.query(UNPARK_NEXT(outboxTables(schema)), [JSON.stringify(after)]);
}
