import { defineEvents, type EventOf, type PayloadOf } from '../contracts/define.js';
import * as z from '../zod.js';

/**
 * The reference stack's event contracts: the one definition of each event
 * its producer writes (`createOrder`) and its consumer handles
 * (`orderNotificationHandlers`), published by `pg-lambda-outbox contracts`.
 */
export const orderEvents = defineEvents({
  'order.created': {
    schema: z.object({
      orderId: z.uuid(),
      customerId: z.string().min(1),
      totalCents: z.int().nonnegative(),
      currency: z.string().regex(/^[A-Z]{3}$/, 'a three-letter ISO 4217 code'),
    }),
    aggregateType: 'order',
    description: 'An order was saved; its total is in the smallest unit of its currency.',
  },
});

/** Payload of the `order.created` event. */
export type OrderCreated = PayloadOf<typeof orderEvents, 'order.created'>;

/** What the consumer's handler of `order.created` receives. */
export type OrderCreatedEvent = EventOf<typeof orderEvents, 'order.created'>;
