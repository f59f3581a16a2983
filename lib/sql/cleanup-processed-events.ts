import type { Queryable } from '../db/queryable.js';
import { type OutboxTables, outboxTables } from '../db/schema.js';

// Same shape as the outbox cleanup (see cleanup-outbox-events.ts): one bounded,
// self-committing statement per batch, oldest first through
// processed_events_processed_at, rows found again by primary key.
// A dedupe row only protects against redelivery while the message can still
// arrive, so the retention must outlast the queue's (SQS keeps a message at
// most 14 days): the default is 30, and the config warns below 14.
const DELETE_PROCESSED_EVENTS = (t: OutboxTables) => `
DELETE FROM ${t.processedEvents}
WHERE (consumer, event_id) IN (
  SELECT consumer, event_id FROM ${t.processedEvents}
  WHERE processed_at < $1::timestamptz
  ORDER BY processed_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED)`;

/** Deletes at most `limit` dedupe rows recorded before `cutoff`; returns how many. */
export async function deleteProcessedEvents(
  db: Queryable,
  cutoff: Date,
  limit: number,
  schema?: string,
): Promise<number> {
  const result = await db.query(DELETE_PROCESSED_EVENTS(outboxTables(schema)), [cutoff, limit]);
  return result.rowCount ?? 0;
}

// The replay dedupe rows of consumers with `replays: 'handle'`: same shape and
// the same retention as processed_events.
const DELETE_PROCESSED_EVENT_REPLAYS = (t: OutboxTables) => `
DELETE FROM ${t.processedEventReplays}
WHERE (consumer, event_id, replay_id) IN (
  SELECT consumer, event_id, replay_id FROM ${t.processedEventReplays}
  WHERE processed_at < $1::timestamptz
  ORDER BY processed_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED)`;

/** Deletes at most `limit` replay dedupe rows recorded before `cutoff`; returns how many. */
export async function deleteProcessedEventReplays(
  db: Queryable,
  cutoff: Date,
  limit: number,
  schema?: string,
): Promise<number> {
  const result = await db.query(DELETE_PROCESSED_EVENT_REPLAYS(outboxTables(schema)), [cutoff, limit]);
  return result.rowCount ?? 0;
}
