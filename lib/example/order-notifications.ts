import type { ClientBase } from 'pg';
import type { HandlerContext } from '../consumer/handlers.js';
import type { Envelope } from '../publish/envelope.js';
import { type OrderCreated, orderEvents } from './events.js';

/**
 * The example consumer's reaction to `order.created`: record that the
 * customer was notified, with the consumer's transaction, so the row commits
 * together with the dedupe row or not at all. `order_notifications` is
 * deliberately not unique per order: a duplicate that slipped past the dedupe
 * would show as a second row.
 *
 * @example
 * const consumer = createConsumer({ name: 'order-consumer', pool, handlers: orderNotificationHandlers });
 */
export async function notifyOrderCreated(
  event: Envelope<OrderCreated>,
  tx: ClientBase,
  _context?: HandlerContext,
): Promise<void> {
  await tx.query('INSERT INTO order_notifications (order_id, event_id) VALUES ($1, $2)', [
    event.payload.orderId,
    event.id,
  ]);
}

/**
 * The example consumer's handlers, declared against the same contracts as
 * the producer: each payload is checked against its schema before
 * `notifyOrderCreated` runs, so a bad event fails its record with a clear
 * reason (a ContractViolationError) instead of a database error.
 */
export const orderNotificationHandlers = orderEvents.handlers({
  'order.created': notifyOrderCreated,
});
