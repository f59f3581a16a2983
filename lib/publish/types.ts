import type { OutboxEvent } from '../outbox/types.js';

/** What happened to one event at one target. */
export type TargetResult =
  | { ok: true }
  | {
      ok: false;
      /** False when the event itself is at fault and a retry cannot succeed. */
      retryable: boolean;
      error: string;
      code?: string | undefined;
    };

/** What happened to one event across all its targets. */
export type PublishOutcome =
  | { eventId: string; ok: true; delivered: string[] }
  | {
      eventId: string;
      ok: false;
      retryable: boolean;
      error: string;
      code?: string | undefined;
      /** Targets that accepted the event (now or earlier); a retry skips them. */
      delivered: string[];
    };

/**
 * Sends events somewhere and reports one outcome per event. The relay depends
 * on this interface only, never on an AWS client. Implementations must not
 * throw for per-event problems; a throw is treated as a retryable failure of
 * the whole batch.
 */
export interface Publisher {
  publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]>;
}

/** One destination (a queue, a bus) that takes batches of events. */
export interface Transport {
  /** Stable identity of the destination, e.g. `sqs:<queue url>`; stored in `delivered_targets`. */
  readonly key: string;
  /** Sends the events, returning a result for every event id. */
  send(events: readonly OutboxEvent[]): Promise<Map<string, TargetResult>>;
}
