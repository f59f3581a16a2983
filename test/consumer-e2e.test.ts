import { createHash } from 'node:crypto';
import { CreateEventBusCommand, PutRuleCommand, PutTargetsCommand } from '@aws-sdk/client-eventbridge';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createOrder } from '../lib/example/orders.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import { awsClients, createQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { lambdaContext } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';
import { deleteAcknowledged, receiveBatch } from './support/sqs-batch.js';
import { toSqsRecord } from './support/sqs-event.js';

const CONSUMER = 'order-consumer-e2e';

const db = useTestDatabase();
const aws = awsClients();
let direct: { url: string; arn: string };
let fromBus: { url: string; arn: string };
let bus: string;
let fn: typeof import('../functions/consumer.js');

beforeAll(async () => {
  direct = await createQueue(aws.sqs, uniqueName('consumer-e2e-direct'));
  fromBus = await createQueue(aws.sqs, uniqueName('consumer-e2e-bus'));
  bus = uniqueName('consumer-e2e-bus');
  await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
  // As OrderEventsRule in serverless.yml: the relay's order events to the consumer's queue.
  const rule = uniqueName('consumer-e2e-rule');
  await aws.eventBridge.send(
    new PutRuleCommand({
      Name: rule,
      EventBusName: bus,
      EventPattern: JSON.stringify({ source: ['outbox'], 'detail-type': [{ prefix: 'order.' }] }),
    }),
  );
  await aws.eventBridge.send(
    new PutTargetsCommand({ Rule: rule, EventBusName: bus, Targets: [{ Id: 'consumer', Arn: fromBus.arn }] }),
  );
  // The function reads its configuration at cold start, i.e. on import.
  process.env.DATABASE_URL = db.url;
  process.env.CONSUMER_NAME = CONSUMER;
  process.env.POWERTOOLS_METRICS_NAMESPACE = 'OutboxTest';
  process.env.POWERTOOLS_LOG_LEVEL = 'ERROR';
  fn = await import('../functions/consumer.js');
});
beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, processed_events, order_notifications, orders');
});

const relayTo = (routes: RouteConfig[]) => drainUntilIdle(emulatorRelay(db.pool, aws, routes).relay);

async function placeOrders(n: number) {
  const orders: Array<{ orderId: string; eventId: string }> = [];
  for (let i = 0; i < n; i++) {
    orders.push(await createOrder(db.pool, { customerId: `c-${i}`, totalCents: 1000 + i, currency: 'SEK' }));
  }
  return orders;
}

/**
 * Receives batches from the queue and calls the handler with each, deleting
 * what it acknowledged, until `expected` records were handled. (In AWS the
 * event source mapping does this; see test/support/sqs-batch.ts.)
 */
async function pollInto(
  queue: { url: string; arn: string },
  invoke: (event: SQSEvent) => Promise<SQSBatchResponse>,
  expected: number,
) {
  const events: SQSEvent[] = [];
  let received = 0;
  let deleted = 0;
  const deadline = Date.now() + 15_000;
  while (received < expected && Date.now() < deadline) {
    const event = await receiveBatch(aws.sqs, queue);
    if (event.Records.length === 0) continue;
    events.push(event);
    received += event.Records.length;
    deleted += (await deleteAcknowledged(aws.sqs, queue, event, await invoke(event))).deleted;
  }
  return { events, received, deleted };
}

async function notifications() {
  const { rows } = await db.pool.query<{ order_id: string; event_id: string }>(
    'SELECT order_id, event_id FROM order_notifications ORDER BY order_id',
  );
  return rows;
}

const byOrder = (orders: Array<{ orderId: string; eventId: string }>) =>
  orders
    .map((o) => ({ order_id: o.orderId, event_id: o.eventId }))
    .sort((x, y) => x.order_id.localeCompare(y.order_id));

describe('producer → relay → queue → consumer function', () => {
  it('through SQS: each order is notified once, and the records are what Lambda delivers', async () => {
    const orders = await placeOrders(3);
    const summary = await relayTo([{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: direct.url }] }]);
    expect(summary).toMatchObject({ published: 3, deadLettered: 0 });

    const context = lambdaContext(30_000, 'outbox-consumer');
    const { events, received, deleted } = await pollInto(
      direct,
      (event) => fn.consumerHandler(event, context),
      3,
    );
    expect({ received, deleted }).toEqual({ received: 3, deleted: 3 });
    expect(await notifications()).toEqual(byOrder(orders));
    const { rows } = await db.pool.query('SELECT DISTINCT consumer FROM processed_events');
    expect(rows).toEqual([{ consumer: CONSUMER }]);

    // The converted record has Lambda's SQS record shape, field for field.
    const record = events[0]!.Records[0]!;
    expect(Object.keys(record).sort()).toEqual(
      [
        'attributes',
        'awsRegion',
        'body',
        'eventSource',
        'eventSourceARN',
        'md5OfBody',
        'md5OfMessageAttributes',
        'messageAttributes',
        'messageId',
        'receiptHandle',
      ].sort(),
    );
    const envelope = JSON.parse(record.body);
    expect(record).toMatchObject({
      eventSource: 'aws:sqs',
      eventSourceARN: direct.arn,
      awsRegion: 'us-east-1',
      md5OfBody: createHash('md5').update(record.body).digest('hex'),
      attributes: {
        ApproximateReceiveCount: '1',
        SentTimestamp: expect.stringMatching(/^\d+$/),
        SenderId: expect.any(String),
        ApproximateFirstReceiveTimestamp: expect.stringMatching(/^\d+$/),
      },
    });
    expect(record.messageAttributes.eventId).toEqual({
      stringValue: envelope.id,
      stringListValues: [],
      binaryListValues: [],
      dataType: 'String',
    });
    expect(record.messageAttributes.eventType?.stringValue).toBe('order.created');
  });

  it('through EventBridge (bus → rule → queue), with the middy-wrapped handler and its metrics', async () => {
    const orders = await placeOrders(2);
    const summary = await relayTo([{ match: 'order.*', targets: [{ type: 'eventbridge', busName: bus }] }]);
    expect(summary).toMatchObject({ published: 2, deadLettered: 0 });

    const stdout = vi.spyOn(process.stdout, 'write');
    try {
      const context = lambdaContext(30_000, 'outbox-consumer');
      const { events, deleted } = await pollInto(fromBus, (event) => fn.handler(event, context), 2);
      expect(deleted).toBe(2);
      // The body is the EventBridge event; the envelope is its detail.
      const body = JSON.parse(events[0]!.Records[0]!.body);
      expect(body).toMatchObject({
        source: 'outbox',
        'detail-type': 'order.created',
        detail: { type: 'order.created' },
      });
      expect(await notifications()).toEqual(byOrder(orders));

      // Powertools flushed the counts as CloudWatch EMF when the invocation ended.
      const emf = stdout.mock.calls
        .map(([chunk]) => String(chunk))
        .filter((line) => line.includes('"_aws"'))
        .map((line) => JSON.parse(line));
      // One data point per invocation; a flush also carries any left by the
      // unwrapped handler in the tests before, so only the last one is ours.
      const last = (value: number | number[] | undefined) =>
        Array.isArray(value) ? value.at(-1)! : (value ?? 0);
      const totals = emf.reduce(
        (sum, m) => ({
          processed: sum.processed + last(m.Processed),
          duplicates: sum.duplicates + last(m.Duplicates),
          failed: sum.failed + last(m.Failed),
        }),
        { processed: 0, duplicates: 0, failed: 0 },
      );
      expect(totals).toEqual({ processed: 2, duplicates: 0, failed: 0 });
      expect(emf[0]._aws.CloudWatchMetrics[0].Namespace).toBe('OutboxTest');
    } finally {
      stdout.mockRestore();
    }
  });

  it('to both a queue and a bus: the consumer sees the event twice and handles it once', async () => {
    const orders = await placeOrders(2);
    await relayTo([
      {
        match: 'order.*',
        targets: [
          { type: 'sqs', queueUrl: direct.url },
          { type: 'eventbridge', busName: bus },
        ],
      },
    ]);
    const context = lambdaContext(30_000, 'outbox-consumer');
    const invoke = (event: SQSEvent) => fn.consumerHandler(event, context);
    const viaQueue = await pollInto(direct, invoke, 2);
    const viaBus = await pollInto(fromBus, invoke, 2);
    expect([viaQueue.deleted, viaBus.deleted]).toEqual([2, 2]);
    expect(await notifications()).toEqual(byOrder(orders));
  });

  it('refuses to convert a message received without its system attributes', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('consumer-e2e-bare'));
    await createOrder(db.pool, { customerId: 'c', totalCents: 1, currency: 'SEK' });
    await relayTo([{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: queue.url }] }]);
    const [message] = await receiveAll(aws.sqs, queue.url, 1);
    const { Attributes: _dropped, ...bare } = message!;
    expect(() => toSqsRecord(bare, queue.arn)).toThrow(
      /ApproximateReceiveCount.* missing: receive with MessageSystemAttributeNames/,
    );
    expect(() => toSqsRecord(message!, 'not-an-arn')).toThrow(/queueArn/);
  });
});
