import { randomUUID } from 'node:crypto';
import type { Pool } from 'pg';
import { withTransaction } from '../db/transaction.js';
import { ValidationError } from '../errors.js';
import { type OrderCreated, orderEvents } from './events.js';

export type { OrderCreated } from './events.js';

/** The example service's input. */
export interface NewOrder {
  customerId: string;
  totalCents: number;
  currency: string;
}

export interface CreateOrderOptions {
  /** Forwarded to the broker with the event (trace context, correlation id). */
  headers?: Record<string, string>;
  /**
   * Runs inside the transaction after both inserts. The tests use it to fail
   * at the worst moment and prove that neither row survives.
   */
  beforeCommit?: () => Promise<void> | void;
}

function validateOrder(order: NewOrder): void {
  if (typeof order.customerId !== 'string' || order.customerId === '') {
    throw new ValidationError('order.customerId', 'must be a non-empty string');
  }
  if (!Number.isSafeInteger(order.totalCents) || order.totalCents < 0) {
    throw new ValidationError('order.totalCents', 'must be a non-negative integer');
  }
  if (typeof order.currency !== 'string' || !/^[A-Z]{3}$/.test(order.currency)) {
    throw new ValidationError('order.currency', 'must be a three-letter ISO 4217 code');
  }
}

/**
 * Saves an order and its `order.created` event in one transaction: both are
 * committed, or neither is. The relay publishes the event later. The event
 * is written through its contract (`orderEvents`, ./events.ts).
 *
 * @example
 * const { orderId, eventId } = await createOrder(pool, { customerId: 'c-1', totalCents: 4200, currency: 'SEK' });
 */
export async function createOrder(
  pool: Pool,
  order: NewOrder,
  options: CreateOrderOptions = {},
): Promise<{ orderId: string; eventId: string }> {
  validateOrder(order);
  const orderId = randomUUID();
  return withTransaction(pool, async (client) => {
    await client.query(
      'INSERT INTO orders (id, customer_id, total_cents, currency) VALUES ($1, $2, $3, $4)',
      [orderId, order.customerId, order.totalCents, order.currency],
    );
    const payload: OrderCreated = { orderId, ...order };
    // Through the contract: the payload is checked against its schema
    // before the INSERT, and the event carries its contract version.
    const eventId = await orderEvents.enqueue(client, 'order.created', {
      aggregateId: orderId,
      payload,
      headers: options.headers,
    });
    await options.beforeCommit?.();
    return { orderId, eventId };
  });
}

/**
 * Saves many orders and their `order.created` events in one transaction, so
 * they become ready at once (a backlog, for benchmarks and tests). Returns
 * the events' ids, in the orders' order.
 */
export async function createOrders(pool: Pool, orders: readonly NewOrder[]): Promise<string[]> {
  for (const order of orders) validateOrder(order);
  return withTransaction(pool, async (client) => {
    const ids: string[] = [];
    for (let i = 0; i < orders.length; i += 1_000) {
      const chunk = orders.slice(i, i + 1_000).map((order) => ({ orderId: randomUUID(), ...order }));
      await client.query(
        `INSERT INTO orders (id, customer_id, total_cents, currency)
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[])`,
        [
          chunk.map((o) => o.orderId),
          chunk.map((o) => o.customerId),
          chunk.map((o) => o.totalCents),
          chunk.map((o) => o.currency),
        ],
      );
      ids.push(
        ...(await orderEvents.enqueueMany(
          client,
          chunk.map((payload) => ({ type: 'order.created' as const, aggregateId: payload.orderId, payload })),
        )),
      );
    }
    return ids;
  });
}
