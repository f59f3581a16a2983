import type { ClientBase } from 'pg';
import type { OutboxLogger } from '../observer.js';
import type { Envelope } from '../publish/envelope.js';
import type { RecordTrace } from './record-trace.js';
import type { SQSRecord } from './sqs-types.js';

/** How the envelope reached the queue. */
export type MessageSource = 'sqs' | 'eventbridge';

/** What a handler learns about the delivery besides the event itself. */
export interface HandlerContext {
  /** The consumer's name (the dedupe scope). */
  consumer: string;
  /** The SQS message id; differs between two deliveries of one event when the relay re-sent it. */
  messageId: string;
  /** SQS `ApproximateReceiveCount`: 1 on the first delivery of this message. */
  receiveCount: number;
  /** Whether the envelope came straight from the relay or through an EventBridge rule. */
  source: MessageSource;
  /** The SQS record as Lambda delivered it (message attributes, FIFO group...). */
  record: SQSRecord;
  logger: OutboxLogger;
  /**
   * Milliseconds this record may still take (the invocation's time left minus
   * the consumer's safety margin; Infinity when the consumer was not told the
   * time left). Statements on `tx` are cut off when it reaches 0; bound your
   * own calls by it too, e.g. `AbortSignal.timeout(context.remainingMs())`.
   */
  remainingMs: () => number;
  /**
   * The producer's W3C trace context, when the event carries one: from the
   * `traceparent` message attribute, else the envelope's headers, else SQS's
   * `AWSTraceHeader` (X-Ray, converted). See docs/consumer.md, "Trace context".
   */
  trace?: RecordTrace;
  /**
   * Set when the message is a replay of an already published event (an
   * operator's `replay`): `id` is the replay's id. A consumer created with
   * `replays: 'handle'` runs the handler once per replay id; with the default
   * `skip`, only for an event it had not handled before.
   */
  replay?: { id: string };
}

/**
 * Handles one event inside the consumer's transaction. Write through `tx` only:
 * those writes commit together with the dedupe row, or not at all. Throw to
 * fail the record (it is retried by SQS); do not COMMIT or ROLLBACK yourself.
 *
 * The payload type is a promise made by the producer, not a check: validate
 * the payload (with zod, say) where a wrong shape would do harm.
 */
export type EventHandler<P = unknown> = (
  event: Envelope<P>,
  tx: ClientBase,
  context: HandlerContext,
) => Promise<void> | void;

/** Handlers by event type, each typed with its payload: `{ 'order.created': EventHandler<OrderCreated> }`. */
export type HandlerMap<Events extends Record<string, unknown>> = {
  [Type in keyof Events & string]: EventHandler<Events[Type]>;
};

/**
 * Types a set of handlers by the payload of each event type, so that each
 * handler's `event.payload` has its event's type.
 *
 * @example
 * const handlers = defineHandlers<{ 'order.created': OrderCreated; 'order.cancelled': OrderCancelled }>({
 *   'order.created': async (event, tx) => {
 *     await tx.query('INSERT INTO order_notifications (order_id, event_id) VALUES ($1, $2)', [
 *       event.payload.orderId, // typed as OrderCreated
 *       event.id,
 *     ]);
 *   },
 *   'order.cancelled': async (event, tx) => { ... },
 * });
 * const consumer = createConsumer({ name: 'order-consumer', pool, handlers });
 */
export function defineHandlers<Events extends Record<string, unknown>>(
  handlers: HandlerMap<Events>,
): HandlerMap<Events> {
  return handlers;
}
