// pg-lambda-outbox/testing as a team uses it in its own tests: the outbox
// migrated into a schema of its own beside the service's tables, events
// written by the service's code in its transactions, the real relay drained
// into the in-memory publisher, and the messages fed to the service's
// consumer. Only the package's entry points are imported, as a user would.
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import type pg from 'pg';
import { createOutbox, migrate, withTransaction } from 'pg-lambda-outbox';
import { createConsumer, defineHandlers } from 'pg-lambda-outbox/consumer';
import { DEFAULT_TEST_QUEUE_URL, testOutbox } from 'pg-lambda-outbox/testing';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { useTestDatabase } from './support/database.js';

const schema = 'outbox';
const db = useTestDatabase({ migrate: false });
/** The service's outbox handle, its schema said once. */
const shop = createOutbox({ schema });

beforeAll(async () => {
  await migrate({ databaseUrl: db.url, schema });
  await db.pool.query(`
    CREATE TABLE orders (id uuid PRIMARY KEY, total_cents bigint NOT NULL);
    CREATE TABLE receipts (event_id uuid PRIMARY KEY, order_id uuid NOT NULL, total_cents bigint NOT NULL)`);
});

beforeEach(async () => {
  await db.pool.query(
    `TRUNCATE orders, receipts, ${schema}.outbox_events, ${schema}.processed_events, ${schema}.outbox_aggregate_locks`,
  );
});

interface OrderPlaced {
  orderId: string;
  totalCents: number;
}

/** The service's own code: the order and its event in one transaction. */
async function placeOrder(pool: pg.Pool, totalCents: number, options: { fail?: boolean } = {}) {
  const orderId = crypto.randomUUID();
  const eventId = await withTransaction(pool, async (client) => {
    await client.query('INSERT INTO orders (id, total_cents) VALUES ($1, $2)', [orderId, totalCents]);
    const id = await shop.enqueue(client, {
      aggregateType: 'order',
      aggregateId: orderId,
      eventType: 'order.placed',
      payload: { orderId, totalCents } satisfies OrderPlaced,
    });
    if (options.fail) throw new Error('payment declined');
    return id;
  });
  return { orderId, eventId };
}

/** The service's consumer: a receipt per order, written in the dedupe transaction. */
function receiptConsumer(pool: pg.Pool, calls: string[] = [], name = 'billing') {
  return createConsumer({
    outbox: shop,
    name,
    pool,
    handlers: defineHandlers<{ 'order.placed': OrderPlaced }>({
      'order.placed': async (event, tx) => {
        calls.push(event.id);
        await tx.query('INSERT INTO receipts (event_id, order_id, total_cents) VALUES ($1, $2, $3)', [
          event.id,
          event.payload.orderId,
          event.payload.totalCents,
        ]);
      },
    }),
  });
}

describe('pg-lambda-outbox/testing', () => {
  it('drains what was committed, as the messages SQS would receive, and not what was rolled back', async () => {
    const kit = testOutbox({ db: db.pool, outbox: shop });
    const placed = await placeOrder(db.pool, 4200);
    await expect(placeOrder(db.pool, 999, { fail: true })).rejects.toThrow('payment declined');

    const drained = await kit.drain();
    expect(drained.summary).toMatchObject({ published: 1, retried: 0, deadLettered: 0 });
    expect(drained.messages).toHaveLength(1);
    const [message] = drained.messages;
    if (message?.type !== 'sqs') throw new Error('expected an SQS message');
    expect(message.queueUrl).toBe(DEFAULT_TEST_QUEUE_URL);
    expect(message.target).toBe(`sqs:${DEFAULT_TEST_QUEUE_URL}`);
    expect(message.envelope).toEqual({
      id: placed.eventId,
      type: 'order.placed',
      aggregateType: 'order',
      aggregateId: placed.orderId,
      occurredAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      payload: { orderId: placed.orderId, totalCents: 4200 },
      headers: {},
    });
    // The relay's own entry: the envelope's text, compacted, and the attributes consumers filter on.
    expect(JSON.parse(message.entry.MessageBody)).toEqual(message.envelope);
    expect(message.entry.MessageBody).toContain('"payload":{"orderId":');
    expect(message.entry.MessageAttributes).toEqual({
      eventId: { DataType: 'String', StringValue: placed.eventId },
      eventType: { DataType: 'String', StringValue: 'order.placed' },
      aggregateType: { DataType: 'String', StringValue: 'order' },
      aggregateId: { DataType: 'String', StringValue: placed.orderId },
    });
    expect(message.entry.MessageGroupId).toBeUndefined();

    // Published rows are recorded as such: a second drain finds nothing.
    expect((await kit.drain()).messages).toEqual([]);
    expect(kit.messages()).toHaveLength(1);
  });

  it('delivers to the consumer once per event: the handler runs once, a redelivery is a duplicate', async () => {
    const kit = testOutbox({ db: db.pool, outbox: shop });
    const calls: string[] = [];
    const consumer = receiptConsumer(db.pool, calls);
    const orders = [await placeOrder(db.pool, 100), await placeOrder(db.pool, 200)];

    const drained = await kit.drain();
    const first = await kit.deliver(consumer, drained);
    expect(first).toMatchObject({
      processed: 2,
      duplicates: 0,
      failed: 0,
      batchItemFailures: [],
      redeliver: [],
    });
    expect(calls.sort()).toEqual(orders.map((o) => o.eventId).sort());

    const again = await kit.deliver(consumer, drained.messages);
    expect(again).toMatchObject({ processed: 0, duplicates: 2, failed: 0 });
    expect(calls).toHaveLength(2);
    const { rows } = await db.pool.query('SELECT order_id, total_cents FROM receipts ORDER BY total_cents');
    expect(rows).toEqual(orders.map((o, i) => ({ order_id: o.orderId, total_cents: String((i + 1) * 100) })));
  });

  it('hands back what a failing handler left on the queue, with its receive count, for the next delivery', async () => {
    const kit = testOutbox({ db: db.pool, outbox: shop });
    let failing = true;
    const receiveCounts: number[] = [];
    const consumer = createConsumer({
      outbox: shop,
      name: 'flaky',
      pool: db.pool,
      handlers: {
        'order.placed': async (_event, _tx, context) => {
          receiveCounts.push(context.receiveCount);
          if (failing) throw new Error('downstream down');
        },
      },
    });
    await placeOrder(db.pool, 1);

    const drained = await kit.drain();
    const failed = await kit.deliver(consumer, drained);
    expect(failed).toMatchObject({ processed: 0, failed: 1 });
    expect(failed.redeliver).toEqual(drained.messages);
    expect(failed.batchItemFailures).toEqual([{ itemIdentifier: drained.messages[0]?.messageId }]);

    failing = false;
    expect(await kit.deliver(consumer, failed.redeliver)).toMatchObject({ processed: 1, failed: 0 });
    expect(receiveCounts).toEqual([1, 2]);
  });

  it('routes as the relay does: a FIFO queue in aggregate order, a bus through an EventBridge rule', async () => {
    const queueUrl = 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo';
    const kit = testOutbox({
      db: db.pool,
      schema,
      ordering: 'aggregate',
      routes: [
        { match: 'order.*', targets: [{ type: 'sqs', queueUrl }] },
        { match: 'order.placed', targets: [{ type: 'eventbridge', busName: 'shop', source: 'shop.orders' }] },
      ],
    });
    // The first route that matches wins: order.placed goes to the queue only.
    const placed = await placeOrder(db.pool, 300);
    const drained = await kit.drain();
    expect(drained.messages.map((m) => m.target)).toEqual([`sqs:${queueUrl}`]);
    const [message] = drained.messages;
    if (message?.type !== 'sqs') throw new Error('expected an SQS message');
    expect(message.entry.MessageGroupId).toBe(`order:${placed.orderId}`);
    expect(message.entry.MessageDeduplicationId).toBe(placed.eventId);

    const busOnly = testOutbox({
      db: db.pool,
      schema,
      routes: [{ match: '*', targets: [{ type: 'eventbridge', busName: 'shop', source: 'shop.orders' }] }],
    });
    const second = await placeOrder(db.pool, 400);
    const [bus] = (await busOnly.drain()).messages;
    if (bus?.type !== 'eventbridge') throw new Error('expected an EventBridge message');
    expect(bus.entry).toMatchObject({
      EventBusName: 'shop',
      Source: 'shop.orders',
      DetailType: 'order.placed',
    });
    expect(JSON.parse(bus.entry.Detail)).toMatchObject({ id: second.eventId, payload: { totalCents: 400 } });
    const consumer = receiptConsumer(db.pool);
    expect(await busOnly.deliver(consumer, [message, bus])).toMatchObject({ processed: 2, failed: 0 });
    const { rows } = await db.pool.query('SELECT total_cents FROM receipts ORDER BY total_cents');
    expect(rows.map((r) => Number(r.total_cents))).toEqual([300, 400]);
  });

  it('dead-letters at once at a target that rejects the event, and after maxAttempts at one that fails it', async () => {
    const kit = testOutbox({ db: db.pool, schema, relay: { maxAttempts: 1 } });
    kit.failTarget(DEFAULT_TEST_QUEUE_URL, 'permanent');
    const rejected = await placeOrder(db.pool, 1);
    expect((await kit.drain()).summary).toMatchObject({ published: 0, deadLettered: 1 });

    kit.failTarget(DEFAULT_TEST_QUEUE_URL, 'retryable');
    const failed = await placeOrder(db.pool, 2);
    const drained = await kit.drain();
    expect(drained.messages).toEqual([]);
    expect(drained.summary).toMatchObject({
      published: 0,
      deadLettered: 1,
      deadLetteredByType: { 'order.placed': 1 },
    });

    const { rows: deadLetters } = await shop.listDeadLetters(db.pool, { limit: 10 });
    expect(deadLetters.map((d) => d.id).sort()).toEqual([rejected.eventId, failed.eventId].sort());
    expect(deadLetters.map((d) => d.lastError).join('\n')).toMatch(/permanent failure set by failTarget/);
    expect(() => kit.failTarget('https://sqs.us-east-1.amazonaws.com/000000000000/other')).toThrow(
      /no route has the target .*other.* \(targets: sqs:https/,
    );
    expect(() => testOutbox({ db: db.pool, outbox: shop, schema: 'public' })).toThrow(
      /schema: differs from the outbox handle's schema "outbox"/,
    );
  });

  it('retries an event while its target is unavailable, without spending attempts, and publishes it once healed', async () => {
    const kit = testOutbox({
      db: db.pool,
      schema,
      relay: { maxAttempts: 1, backoff: { baseMs: 20, maxMs: 20 } },
    });
    kit.failTarget(DEFAULT_TEST_QUEUE_URL, 'unavailable');
    const placed = await placeOrder(db.pool, 5);
    expect((await kit.drain()).summary).toMatchObject({
      published: 0,
      retried: 1,
      held: 1,
      deadLettered: 0,
    });

    kit.healTarget(DEFAULT_TEST_QUEUE_URL);
    await new Promise((resolve) => setTimeout(resolve, 50)); // the event's backoff
    const drained = await kit.drain();
    expect(drained.summary).toMatchObject({ published: 1, deadLettered: 0 });
    expect(drained.messages.map((m) => m.envelope.id)).toEqual([placed.eventId]);
  });

  it('loads no AWS SDK: no static import of one anywhere in the entry point', async () => {
    const entry = fileURLToPath(new URL('../lib/testing/index.ts', import.meta.url));
    const { metafile } = await build({
      entryPoints: [entry],
      bundle: true,
      platform: 'node',
      format: 'esm',
      packages: 'external',
      metafile: true,
      write: false,
      logLevel: 'silent',
    });
    const staticImports = Object.values(metafile.inputs).flatMap((input) =>
      input.imports.filter((i) => i.external && i.kind === 'import-statement').map((i) => i.path),
    );
    expect(staticImports.filter((p) => p.startsWith('@aws-sdk/') || p.startsWith('@smithy/'))).toEqual([]);
    expect(staticImports).toContain('zod');
  });
});
