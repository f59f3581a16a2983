import type { ClientBase } from 'pg';
import { ValidationError } from '../errors.js';
import type { NewOutboxEvent } from './types.js';
import { type ValidateOptions, type ValidEvent, validateEvent } from './validate-event.js';

/** Anything that can run a query: a `pg` client, usually inside a transaction. */
export type Queryable = Pick<ClientBase, 'query'>;

export type EnqueueOptions = ValidateOptions;

/** Above this many events, one INSERT is split into several (parameter arrays stay modest). */
const INSERT_CHUNK = 1000;

// One statement for any number of events: parallel arrays unnested into rows.
// Values are always parameters, never spliced into the SQL.
const INSERT_EVENTS = `
  INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, headers)
  SELECT id, aggregate_type, aggregate_id, event_type, payload::jsonb, headers::jsonb
  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
    AS e(id, aggregate_type, aggregate_id, event_type, payload, headers)`;

/**
 * Writes events to the outbox on `client`, which should be inside the caller's
 * transaction so the events commit or roll back with the business data.
 * Every event is validated first; on a {@link ValidationError} nothing is
 * written. Returns the event ids in input order.
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
  const valid: ValidEvent[] = events.map((event, i) => validateEvent(event, options, `events[${i}]`));
  const seen = new Set<string>();
  valid.forEach((event, i) => {
    if (seen.has(event.id)) throw new ValidationError(`events[${i}].id`, 'is repeated in this call');
    seen.add(event.id);
  });
  for (let start = 0; start < valid.length; start += INSERT_CHUNK) {
    const chunk = valid.slice(start, start + INSERT_CHUNK);
    await client.query(INSERT_EVENTS, [
      chunk.map((e) => e.id),
      chunk.map((e) => e.aggregateType),
      chunk.map((e) => e.aggregateId),
      chunk.map((e) => e.eventType),
      chunk.map((e) => e.payloadJson),
      chunk.map((e) => e.headersJson),
    ]);
  }
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
