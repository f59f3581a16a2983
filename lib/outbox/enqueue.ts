import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables, resolveSchema, withSchemaErrors } from '../db/schema.js';
import { ValidationError } from '../errors.js';
import { activeTraceHeaders, loadOpenTelemetry } from '../trace/opentelemetry.js';
import { ENQUEUE_CALL_MAX_BYTES } from './limits.js';
import type { NewOutboxEvent } from './types.js';
import { type ValidateOptions, type ValidEvent, validateEvent } from './validate-event.js';

export type { Queryable } from '../db/queryable.js';

export interface EnqueueOptions extends ValidateOptions {
  /**
   * Serialize producers of one aggregate (default `true`): the events of an
   * aggregate get their `seq` only once every other open transaction that
   * enqueued for it has ended, so per-aggregate seq order is commit order and
   * an ordered relay publishes in commit order. The cost is one locked row per
   * aggregate in `outbox_aggregate_locks`, held until the caller's transaction
   * ends (a second writer of the same aggregate waits). Turn it off only when
   * no two transactions ever write one aggregate at once, or when order does
   * not matter. See docs/ordering.md.
   */
  lockAggregates?: boolean;
  /**
   * The schema the outbox tables live in (`migrate({ schema })`). Default:
   * the `OUTBOX_SCHEMA` environment variable, else unqualified names, found
   * through the connection's `search_path`. Said once for a whole service
   * by `createOutbox({ schema })`.
   */
  schema?: string | undefined;
}

// One statement for any number of events: parallel arrays unnested into rows.
// Values are always parameters, never spliced into the SQL. One statement,
// never chunks: on a pool each statement is its own transaction, and a
// failure in a later chunk would leave the earlier ones committed (a caller
// retrying the call would write them twice under new ids).
const INSERT_EVENTS = (t: OutboxTables) => `
  INSERT INTO ${t.events} (id, aggregate_type, aggregate_id, event_type, payload, headers, payload_bytes)
  SELECT id, aggregate_type, aggregate_id, event_type, payload::jsonb, headers::jsonb, payload_bytes
  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[])
    AS e(id, aggregate_type, aggregate_id, event_type, payload, headers, payload_bytes)`;

// The same INSERT, but first locking every aggregate of the call, in one
// statement (so it also holds for a caller that passes a pool: the statement
// is then its own transaction). Why it is shaped this way:
// - Per aggregate, INSERT ... ON CONFLICT either creates its lock row (a
//   concurrent producer of the same aggregate then waits on our uncommitted
//   row) or, when the row exists, locks it: PostgreSQL locks the conflicting
//   row before it evaluates DO UPDATE's WHERE, and `WHERE false` then updates
//   nothing, so no new row version is written. One pass per key, no separate
//   INSERT-then-SELECT FOR UPDATE phases that could take locks out of order.
// - Keys arrive deduplicated and sorted (by the caller, in code-point order)
//   and are processed in that order (ORDER BY ordinality): two transactions
//   locking overlapping sets of aggregates in one call cannot deadlock.
// - The events' seq comes from nextval() in the outer INSERT's projection,
//   which runs only after the one-time filter; that filter's InitPlan reads
//   the whole \`locked\` CTE first. So every lock is held before any event of
//   this call is numbered.
// - A row lock, not pg_advisory_xact_lock: plain DML never pins a connection
//   behind RDS Proxy and shares no key space with the application's own
//   advisory locks (docs/ordering.md).
const LOCK_AND_INSERT_EVENTS = (t: OutboxTables) => `
  WITH locked AS (
    INSERT INTO ${t.aggregateLocks} AS l (aggregate_type, aggregate_id)
    SELECT t, i FROM unnest($8::text[], $9::text[]) WITH ORDINALITY AS k(t, i, n)
    ORDER BY n
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET created_at = l.created_at WHERE false
    RETURNING 1
  )
${INSERT_EVENTS(t)}
  WHERE (SELECT count(*) FROM locked) >= 0`;

/** Distinct (type, id) pairs of the events, in the one order every producer locks them in. */
function aggregateKeys(events: readonly ValidEvent[]): [string[], string[]] {
  const keys = new Map<string, [string, string]>();
  for (const e of events)
    keys.set(JSON.stringify([e.aggregateType, e.aggregateId]), [e.aggregateType, e.aggregateId]);
  const sorted = [...keys.values()].sort(([t1, i1], [t2, i2]) =>
    t1 !== t2 ? (t1 < t2 ? -1 : 1) : i1 < i2 ? -1 : i1 > i2 ? 1 : 0,
  );
  return [sorted.map(([t]) => t), sorted.map(([, i]) => i)];
}

/**
 * Writes events to the outbox on `client`, which should be inside the caller's
 * transaction so the events commit or roll back with the business data.
 * Every event is validated first; on a {@link ValidationError} nothing is
 * written. All of a call's events are one statement, so the call is all or
 * nothing even on a pool (at most {@link ENQUEUE_CALL_MAX_BYTES} of payloads
 * per call). Returns the event ids in input order.
 *
 * Trace context: an event's `trace` option or `headers.traceparent` (and
 * `tracestate`) is validated and stored in its headers; an event with
 * neither gets the active OpenTelemetry span's, when `@opentelemetry/api` is
 * installed and a span is active (docs/consumer.md, "Trace context").
 *
 * Unless `lockAggregates: false`, the aggregates of the events are locked
 * first (until the transaction ends), so two transactions writing one
 * aggregate commit their events in seq order: see {@link EnqueueOptions}.
 * Enqueue all of a transaction's events in one call where you can: locks
 * taken by one call are ordered, locks taken across several calls of two
 * transactions can deadlock (PostgreSQL then aborts one of them).
 *
 * @example
 * await withTransaction(pool, async (client) => {
 *   await client.query('UPDATE accounts SET ...');
 *   const [id] = await enqueueEvents(client, [
 *     { aggregateType: 'account', aggregateId: '42', eventType: 'account.debited', payload: { cents: 500 } },
 *   ]);
 * });
 */
export async function enqueueEvents(
  client: Queryable,
  events: readonly NewOutboxEvent[],
  options: EnqueueOptions = {},
): Promise<string[]> {
  if (!Array.isArray(events)) {
    throw new ValidationError('events', 'must be an array');
  }
  // The active span's context, for events written without trace context
  // (one span for the whole call). Only looked up when one needs it.
  const untraced = events.some(
    (e) =>
      e?.trace === undefined &&
      (typeof e?.headers !== 'object' || !Object.hasOwn(e.headers ?? {}, 'traceparent')),
  );
  const ambient = untraced ? activeTraceHeaders(await loadOpenTelemetry()) : undefined;
  const valid: ValidEvent[] = events.map((event, i) =>
    validateEvent(event, options, `events[${i}]`, ambient),
  );
  const seen = new Set<string>();
  valid.forEach((event, i) => {
    if (seen.has(event.id)) throw new ValidationError(`events[${i}].id`, 'is repeated in this call');
    seen.add(event.id);
  });
  let bytes = 0;
  const payloadBytes = valid.map((e) => Buffer.byteLength(e.payloadJson));
  valid.forEach((e, i) => {
    bytes += (payloadBytes[i] as number) + Buffer.byteLength(e.headersJson);
  });
  if (bytes > ENQUEUE_CALL_MAX_BYTES) {
    throw new ValidationError(
      'events',
      `${valid.length} events of ${bytes} bytes in all; one call writes at most ${ENQUEUE_CALL_MAX_BYTES} bytes ` +
        '(split them over several calls inside one transaction)',
    );
  }
  const schema = resolveSchema(options.schema);
  const tables = outboxTables(schema);
  const values: unknown[] = [
    valid.map((e) => e.id),
    valid.map((e) => e.aggregateType),
    valid.map((e) => e.aggregateId),
    valid.map((e) => e.eventType),
    valid.map((e) => e.payloadJson),
    valid.map((e) => e.headersJson),
    payloadBytes,
  ];
  // A missing table or column (the wrong schema, or none given) becomes an
  // OutboxSchemaError that says where the outbox looked and what to do.
  await withSchemaErrors(schema, () =>
    (options.lockAggregates ?? true)
      ? client.query(LOCK_AND_INSERT_EVENTS(tables), [...values, ...aggregateKeys(valid)])
      : client.query(INSERT_EVENTS(tables), values),
  );
  return valid.map((e) => e.id);
}

/** Writes one event; see {@link enqueueEvents}. Returns its id. */
export async function enqueueEvent(
  client: Queryable,
  event: NewOutboxEvent,
  options: EnqueueOptions = {},
): Promise<string> {
  const [id] = await enqueueEvents(client, [event], options);
  return id as string;
}
