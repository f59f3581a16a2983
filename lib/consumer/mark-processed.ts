import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables, withSchemaErrors } from '../db/schema.js';

// Why it is shaped this way:
// - It runs first in the record's transaction, before the handler, so the
//   dedupe row and the handler's writes commit together or not at all.
// - ON CONFLICT DO NOTHING turns "already processed" into "no row inserted"
//   instead of an error, which would abort the transaction.
// - Two deliveries of one event handled at the same moment serialize on the
//   primary key: the second INSERT waits for the first transaction; if that
//   commits it inserts nothing (duplicate), if it rolls back it inserts and
//   the second delivery does the work. No event is handled twice, none lost.
const MARK_PROCESSED_SQL = (t: OutboxTables) => `
INSERT INTO ${t.processedEvents} (consumer, event_id, event_type)
VALUES ($1, $2, $3)
ON CONFLICT (consumer, event_id) DO NOTHING`;

/**
 * Claims `(consumer, eventId)` inside the caller's transaction. Returns false
 * when the event was already processed by this consumer (committed earlier).
 *
 * @example
 * if (!(await markProcessed(tx, 'order-consumer', envelope.id, envelope.type))) return 'duplicate';
 */
export async function markProcessed(
  tx: Queryable,
  consumer: string,
  eventId: string,
  eventType: string,
  schema?: string,
): Promise<boolean> {
  const result = await withSchemaErrors(schema, () =>
    tx.query(MARK_PROCESSED_SQL(outboxTables(schema)), [consumer, eventId, eventType]),
  );
  return result.rowCount === 1;
}

// A replay handled by a consumer with `replays: 'handle'`: one row per
// (consumer, event, replay), so each replay of an event is handled once,
// with the same serialization on the primary key as above.
const MARK_REPLAY_PROCESSED_SQL = (t: OutboxTables) => `
INSERT INTO ${t.processedEventReplays} (consumer, event_id, replay_id, event_type)
VALUES ($1, $2, $3, $4)
ON CONFLICT (consumer, event_id, replay_id) DO NOTHING`;

/**
 * Claims `(consumer, eventId, replayId)` inside the caller's transaction.
 * Returns false when this consumer already handled this replay of the event.
 */
export async function markReplayProcessed(
  tx: Queryable,
  consumer: string,
  eventId: string,
  replayId: string,
  eventType: string,
  schema?: string,
): Promise<boolean> {
  const result = await withSchemaErrors(schema, () =>
    tx.query(MARK_REPLAY_PROCESSED_SQL(outboxTables(schema)), [consumer, eventId, replayId, eventType]),
  );
  return result.rowCount === 1;
}

const WAS_PROCESSED_SQL = (t: OutboxTables) => `
SELECT 1 FROM ${t.processedEvents} WHERE consumer = $1 AND event_id = $2`;

const WAS_REPLAY_PROCESSED_SQL = (t: OutboxTables) => `
SELECT 1 FROM ${t.processedEventReplays} WHERE consumer = $1 AND event_id = $2 AND replay_id = $3`;

/**
 * True when this consumer already committed the event (or, with `replayId`,
 * this replay of it): a look that writes nothing and takes no lock, for work
 * worth skipping before the record's transaction (fetching a payload stored
 * in S3). It only saves work: the record's transaction still decides, with
 * {@link markProcessed}, since a concurrent delivery may commit in between.
 */
export async function wasProcessed(
  db: Queryable,
  consumer: string,
  eventId: string,
  replayId: string | undefined,
  schema?: string,
): Promise<boolean> {
  const tables = outboxTables(schema);
  const result = await withSchemaErrors(schema, () =>
    replayId === undefined
      ? db.query(WAS_PROCESSED_SQL(tables), [consumer, eventId])
      : db.query(WAS_REPLAY_PROCESSED_SQL(tables), [consumer, eventId, replayId]),
  );
  return result.rows.length > 0;
}
