import type { OutboxEvent } from '../outbox/types.js';

/**
 * What every broker message carries. `id` is the consumers' dedupe key. Field
 * names follow the Debezium outbox event router's (id, type, aggregate type and
 * id, payload) so consumers can move to CDC later without changes.
 */
export interface Envelope<P = unknown> {
  id: string;
  type: string;
  aggregateType: string;
  aggregateId: string;
  occurredAt: string;
  payload: P;
  headers: Record<string, string>;
}

export function toEnvelope(event: OutboxEvent): Envelope {
  return {
    id: event.id,
    type: event.eventType,
    aggregateType: event.aggregateType,
    aggregateId: event.aggregateId,
    occurredAt: event.createdAt.toISOString(),
    payload: event.payload,
    headers: event.headers,
  };
}
