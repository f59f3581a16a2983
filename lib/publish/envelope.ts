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
  /**
   * The event's payload. On the wire it is absent when the relay stored it
   * in S3 (`payloadRef`); the consumer fetches it, so handlers always get it.
   */
  payload: P;
  headers: Record<string, string>;
  /**
   * Present only when the message is a replay of an already published event
   * (an operator's `replay`): the replay's id. Consumers deduplicate a replay
   * like any redelivery unless created with `replays: 'handle'`.
   */
  replayId?: string;
  /**
   * On the wire only, instead of `payload`, when the payload did not fit the
   * target's message and the relay stored it in S3 (docs/consumer.md,
   * "Large payloads"). The consumer resolves it and removes it.
   */
  payloadRef?: PayloadRef;
}

/** Where a payload stored in S3 is, and how to check it: UTF-8 JSON text of `bytes` bytes. */
export interface PayloadRef {
  s3: { bucket: string; key: string };
  bytes: number;
  /** SHA-256 of the object's bytes, lowercase hex. */
  sha256: string;
}
