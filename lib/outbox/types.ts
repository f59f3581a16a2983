/** What a producer hands to {@link enqueueEvents}. */
export interface NewOutboxEvent<P = unknown> {
  /** Kind of entity the event is about, e.g. `order`. */
  aggregateType: string;
  /** Id of that entity; events of one aggregate are ordered when ordering is on. */
  aggregateId: string;
  /** Event name, e.g. `order.created`; routing matches on it. */
  eventType: string;
  /** Any JSON-serializable value. */
  payload: P;
  /** String headers forwarded to the broker (trace context, correlation ids). */
  headers?: Record<string, string>;
  /**
   * W3C trace context of the operation that produced the event, stored as the
   * `traceparent`/`tracestate` headers (the same as passing them in
   * `headers`). Validated; without it (and without `headers.traceparent`) the
   * active OpenTelemetry span's context is taken, if `@opentelemetry/api` is
   * installed. See docs/consumer.md, "Trace context".
   */
  trace?: { traceparent: string; tracestate?: string };
  /** Event id (UUID); generated when absent. Consumers deduplicate on it. */
  id?: string;
}

/** A row of `outbox_events` as the relay sees it after claiming it. */
export interface OutboxEvent {
  id: string;
  seq: string;
  aggregateType: string;
  aggregateId: string;
  eventType: string;
  payload: unknown;
  /**
   * The payload exactly as committed (`payload::text`): published as-is, so
   * big integers and decimals reach the broker unrounded.
   */
  payloadJson: string;
  headers: Record<string, string>;
  createdAt: Date;
  /** Claims so far, this one included. */
  attempts: number;
  /** Targets that accepted the event on an earlier attempt. */
  deliveredTargets: string[];
  /**
   * Set when the event is pending again because an operator replayed it: the
   * replay's id. The message carries it as the replay marker (`replayId` in
   * the envelope and as an SQS attribute; FIFO deduplication id
   * `<id>:<replayId>`).
   */
  replayId?: string | undefined;
  /** When the replay was requested. */
  replayedAt?: Date | undefined;
  /**
   * Since when the event has been failing for reasons of the environment
   * (outage, throttling, an open circuit, a deadline), counted from the last
   * time it was asked to go out (enqueue, redrive, replay). Absent until the
   * first such failure. The maximum pending age counts from here.
   */
  failingSince?: Date | undefined;
}
