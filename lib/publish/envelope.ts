/**
 * What every broker message carries. `id` is the consumers' dedupe key. Field
 * names follow the Debezium outbox event router's (id, type, aggregate type and
 * id, payload) so consumers can move to CDC later without changes. The JSON
 * text is built by `envelopeJson` in messages.ts.
 */
export interface Envelope<P = unknown> {
  id: string;
  type: string;
  aggregateType: string;
  aggregateId: string;
  occurredAt: string;
  payload: P;
  headers: Record<string, string>;
  /**
   * Present only when the message is a replay of an already published event
   * (an operator's `replay`): the replay's id. Consumers deduplicate a replay
   * like any redelivery unless created with `replays: 'handle'`.
   */
  replayId?: string;
}
