import type { ClientBase } from 'pg';
import { z } from 'zod';
import { defineHandlers, type HandlerContext } from '../consumer/handlers.js';
import type { Envelope } from '../publish/envelope.js';
import type { OrderCreated } from './orders.js';

// The payload type is the producer's promise; the consumer checks the one
// field it writes to a uuid column, so a bad event fails with a clear message
// instead of a database error.
const orderCreatedSchema = z.object({ orderId: z.guid() });

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
  const { orderId } = orderCreatedSchema.parse(event.payload);
  await tx.query('INSERT INTO order_notifications (order_id, event_id) VALUES ($1, $2)', [orderId, event.id]);
}

/** The example consumer's handlers by event type. */
export const orderNotificationHandlers = defineHandlers<{ 'order.created': OrderCreated }>({
  'order.created': notifyOrderCreated,
});
