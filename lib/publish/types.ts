import type { OutboxEvent } from '../outbox/types.js';

/** How a failure counts against the event. */
export interface FailureInfo {
  /** False when the event itself is at fault and a retry cannot succeed. */
  retryable: boolean;
  /**
   * True when the environment is at fault (network, timeout, throttling,
   * outage, access denied, missing queue, the relay's own deadline): the
   * event is retried without spending an attempt.
   */
  environment: boolean;
  error: string;
  code?: string | undefined;
  /** Earliest useful retry (the target is backed off as a whole until then). */
  retryAfterMs?: number | undefined;
  /** Environment failures: the targets the event waits for (released when one recovers). */
  waitingFor?: string[] | undefined;
  /**
   * Ordered mode: not sent (or not counted as sent) because an earlier event
   * of its aggregate was not delivered; it goes again right after that one.
   * Not the event's fault: no attempt is spent and it does not back off.
   */
  heldBack?: boolean | undefined;
}

/** What happened to one event at one target. */
export type TargetResult = { ok: true } | ({ ok: false } & FailureInfo);

/** What happened to one event across all its targets. */
export type PublishOutcome =
  | { eventId: string; ok: true; delivered: string[] }
  | ({
      eventId: string;
      ok: false;
      /** Targets that accepted the event (now or earlier); a retry skips them. */
      delivered: string[];
    } & FailureInfo);

/** Per-publish settings the relay hands down to every API call. */
export interface PublishContext {
  /**
   * Aborted when the batch's deadline passes: calls in flight are cancelled
   * and calls not yet started are not made; their events fail with
   * `DeadlineExceeded` (an environment failure).
   */
  signal?: AbortSignal | undefined;
  /**
   * Per-aggregate order (`OUTBOX_ORDERING=aggregate`): the events are in seq
   * order, and a transport must never let a later event of an aggregate reach
   * its target before an earlier one of the same publish was accepted. After
   * the first event of an aggregate that is not delivered, the aggregate's
   * later events are reported `heldBack` (see docs/ordering.md).
   */
  ordered?: boolean | undefined;
}

/**
 * Sends events somewhere and reports one outcome per event. The relay depends
 * on this interface only, never on an AWS client. Implementations must not
 * throw for per-event problems; a throw is treated as a retryable failure of
 * the whole batch.
 */
export interface Publisher {
  publish(events: readonly OutboxEvent[], context?: PublishContext): Promise<PublishOutcome[]>;
  /**
   * Targets that answered again after being unavailable, since the last call.
   * The relay releases events held back for them, so they go out at once.
   */
  takeRecoveredTargets?(): string[];
}

/** Asked before each API call and told its result; the router's circuit breaker. */
export interface CallGate {
  /** False when the target is backed off: the call is not made. */
  allowCall(): boolean;
  /** Result of a call that was made: undefined on success. */
  report(failure: { environment: boolean } | undefined): void;
  /** How long to hold events whose call was not made. */
  retryAfterMs(): number;
}

export interface SendContext extends PublishContext {
  gate?: CallGate | undefined;
}

/** One destination (a queue, a bus) that takes batches of events. */
export interface Transport {
  /** Stable identity of the destination, e.g. `sqs:<queue url>`; stored in `delivered_targets`. */
  readonly key: string;
  /** Sends the events, returning a result for every event id. */
  send(events: readonly OutboxEvent[], context?: SendContext): Promise<Map<string, TargetResult>>;
}
