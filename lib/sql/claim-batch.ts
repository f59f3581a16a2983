import type { ClientBase } from 'pg';
import type { OutboxEvent } from '../outbox/types.js';

export type Queryable = Pick<ClientBase, 'query'>;

export interface ClaimParams {
  /** Most rows to claim. */
  limit: number;
  /** Lease length; the rows are the caller's until then, without any open transaction. */
  leaseMs: number;
  /** Lease owner id, unique to this claim; only it can record outcomes. */
  leaseId: string;
  /** Attempts after which a row is dead-lettered instead of claimed again. */
  maxAttempts: number;
  /** Per-aggregate ordering: only claim an aggregate's earliest unfinished event. */
  ordered: boolean;
}

export interface ClaimResult {
  events: OutboxEvent[];
  /** Rows found to have used every attempt without an outcome; now dead letters. */
  exhausted: Array<{ id: string; eventType: string; aggregateId: string; attempts: number }>;
}

// Why it is shaped this way:
// - One statement that commits at once: SKIP LOCKED hands concurrent relays
//   disjoint rows, and the lease (locked_until, locked_by) keeps them ours
//   after the row locks are gone, so no transaction spans the AWS calls.
// - The WHERE clause repeats the partial index predicate so the planner walks
//   outbox_events_claimable in seq order and stops after LIMIT rows.
// - A row is claimable when it is not leased (or its lease expired: the relay
//   holding it died) and not backing off.
// - Every claim counts as an attempt. A row whose attempts are all used and is
//   still unfinished lost its last lease without an outcome (it keeps killing
//   the relay): it becomes a dead letter here instead of looping forever.
// - Ordered mode claims only the head of each aggregate (no earlier unfinished
//   event). Whether an earlier event is unfinished only changes when its
//   outcome commits, so two relays can never hold two events of one aggregate.
function claimSql(ordered: boolean): string {
  return `
WITH picked AS (
  SELECT e.id
  FROM outbox_events e
  WHERE e.processed_at IS NULL
    AND e.dead_lettered_at IS NULL
    AND (e.locked_until IS NULL OR e.locked_until < now())
    AND (e.retry_after IS NULL OR e.retry_after <= now())
    ${
      ordered
        ? `AND NOT EXISTS (
      SELECT 1 FROM outbox_events p
      WHERE p.aggregate_type = e.aggregate_type
        AND p.aggregate_id = e.aggregate_id
        AND p.seq < e.seq
        AND p.processed_at IS NULL
        AND p.dead_lettered_at IS NULL)`
        : ''
    }
  ORDER BY e.seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)
UPDATE outbox_events e
SET attempts = CASE WHEN e.attempts >= $4 THEN e.attempts ELSE e.attempts + 1 END,
    locked_until = CASE WHEN e.attempts >= $4 THEN NULL ELSE now() + $2 * interval '1 millisecond' END,
    locked_by = CASE WHEN e.attempts >= $4 THEN NULL ELSE $3::uuid END,
    dead_lettered_at = CASE WHEN e.attempts >= $4 THEN now() END,
    last_error = CASE WHEN e.attempts >= $4
      THEN 'attempt limit reached: lease expired without an outcome after ' || e.attempts
           || ' attempts (the relay crashed or timed out while publishing)'
           || coalesce('; previous error: ' || e.last_error, '')
      ELSE e.last_error END
FROM picked
WHERE e.id = picked.id
RETURNING e.id, e.seq, e.aggregate_type, e.aggregate_id, e.event_type, e.payload, e.payload::text AS payload_json, e.headers,
          e.created_at, e.attempts, e.delivered_targets, e.dead_lettered_at IS NOT NULL AS exhausted`;
}

const SQL = { ordered: claimSql(true), unordered: claimSql(false) };

interface Row {
  id: string;
  seq: string;
  aggregate_type: string;
  aggregate_id: string;
  event_type: string;
  payload: unknown;
  payload_json: string;
  headers: Record<string, string>;
  created_at: Date;
  attempts: number;
  delivered_targets: string[];
  exhausted: boolean;
}

/** Claims up to `limit` publishable rows under a new lease; see the comment above for the rules. */
export async function claimBatch(db: Queryable, params: ClaimParams): Promise<ClaimResult> {
  const { rows } = await db.query<Row>(params.ordered ? SQL.ordered : SQL.unordered, [
    params.limit,
    params.leaseMs,
    params.leaseId,
    params.maxAttempts,
  ]);
  const result: ClaimResult = { events: [], exhausted: [] };
  // UPDATE ... RETURNING gives no order guarantee; publish in seq order.
  rows.sort((a, b) => (BigInt(a.seq) < BigInt(b.seq) ? -1 : 1));
  for (const row of rows) {
    if (row.exhausted) {
      result.exhausted.push({
        id: row.id,
        eventType: row.event_type,
        aggregateId: row.aggregate_id,
        attempts: row.attempts,
      });
    } else {
      result.events.push({
        id: row.id,
        seq: row.seq,
        aggregateType: row.aggregate_type,
        aggregateId: row.aggregate_id,
        eventType: row.event_type,
        payload: row.payload,
        payloadJson: row.payload_json,
        headers: row.headers,
        createdAt: row.created_at,
        attempts: row.attempts,
        deliveredTargets: row.delivered_targets,
      });
    }
  }
  return result;
}
