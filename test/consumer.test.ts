import { randomUUID } from 'node:crypto';
import {
  ChangeMessageVisibilityBatchCommand,
  SendMessageBatchCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { SQSEvent, SQSRecord } from 'aws-lambda';
import { beforeEach, describe, expect, expectTypeOf, it } from 'vitest';
import { createConsumer } from '../lib/consumer/consumer.js';
import {
  DatabaseUnavailableError,
  MalformedMessageError,
  TransactionRolledBackError,
} from '../lib/consumer/errors.js';
import { defineHandlers, type EventHandler } from '../lib/consumer/handlers.js';
import { ConfigError } from '../lib/errors.js';
import { notifyOrderCreated, orderNotificationHandlers } from '../lib/example/order-notifications.js';
import type { OrderCreated } from '../lib/example/orders.js';
import type { Envelope } from '../lib/publish/envelope.js';
import { awsClients, createQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger } from './support/events.js';
import { deleteAcknowledged, receiveBatch, type TestQueue } from './support/sqs-batch.js';

const db = useTestDatabase();
const aws = awsClients();

beforeEach(async () => {
  await db.pool.query('TRUNCATE processed_events, order_notifications');
});

/** An envelope as the relay publishes it. */
function orderEnvelope(orderId = randomUUID(), id = randomUUID()): Envelope<OrderCreated> {
  return {
    id,
    type: 'order.created',
    aggregateType: 'order',
    aggregateId: orderId,
    occurredAt: new Date().toISOString(),
    payload: { orderId, customerId: 'customer-secret-4711', totalCents: 4200, currency: 'SEK' },
    headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
  };
}

/** The body an EventBridge rule delivers to SQS for an envelope the relay put on a bus. */
function viaEventBridge(envelope: Envelope): string {
  return JSON.stringify({
    version: '0',
    id: randomUUID(),
    'detail-type': envelope.type,
    source: 'outbox',
    account: '123456789012',
    time: new Date().toISOString(),
    region: 'us-east-1',
    resources: [],
    detail: envelope,
  });
}

async function send(
  sqs: SQSClient,
  queueUrl: string,
  bodies: string[],
  fifo?: (i: number) => { group: string },
): Promise<string[]> {
  const ids: string[] = [];
  for (let start = 0; start < bodies.length; start += 10) {
    const chunk = bodies.slice(start, start + 10);
    const sent = await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: chunk.map((body, k) => ({
          Id: `m${k}`,
          MessageBody: body,
          ...(fifo ? { MessageGroupId: fifo(start + k).group, MessageDeduplicationId: randomUUID() } : {}),
        })),
      }),
    );
    expect(sent.Failed ?? []).toEqual([]);
    const byEntry = new Map((sent.Successful ?? []).map((s) => [s.Id, s.MessageId as string]));
    ids.push(...chunk.map((_, k) => byEntry.get(`m${k}`) as string));
  }
  return ids;
}

/** Receives until `count` records arrived (ReceiveMessage may return fewer than asked). */
async function receiveEvent(queue: TestQueue, count: number, timeoutMs = 10_000): Promise<SQSEvent> {
  const records: SQSRecord[] = [];
  const deadline = Date.now() + timeoutMs;
  while (records.length < count && Date.now() < deadline) {
    records.push(...(await receiveBatch(aws.sqs, queue)).Records);
  }
  return { Records: records };
}

type BatchResponse = { batchItemFailures: Array<{ itemIdentifier: string }> };

/** Deletes what `response` did not report as failed, as Lambda does after the handler returns. */
const settle = (queue: TestQueue, event: SQSEvent, response: BatchResponse) =>
  deleteAcknowledged(aws.sqs, queue, event, response);

/**
 * Makes the records `response` reported as failed visible again at once:
 * stands in for their visibility timeout running out, so a test need not
 * wait for it.
 */
async function endVisibility(queue: TestQueue, event: SQSEvent, response: BatchResponse) {
  const failed = new Set(response.batchItemFailures.map((f) => f.itemIdentifier));
  const records = event.Records.filter((r) => failed.has(r.messageId));
  for (let i = 0; i < records.length; i += 10) {
    const { Failed = [] } = await aws.sqs.send(
      new ChangeMessageVisibilityBatchCommand({
        QueueUrl: queue.url,
        Entries: records
          .slice(i, i + 10)
          .map((r, k) => ({ Id: String(k), ReceiptHandle: r.receiptHandle, VisibilityTimeout: 0 })),
      }),
    );
    expect(Failed).toEqual([]);
  }
}

/** A hand-made record, for cases where the queue adds nothing. */
function record(body: string, messageId = randomUUID()): SQSRecord {
  return {
    messageId,
    receiptHandle: `handle-${messageId}`,
    body,
    attributes: {
      ApproximateReceiveCount: '1',
      SentTimestamp: String(Date.now()),
      SenderId: 'AIDAEXAMPLE',
      ApproximateFirstReceiveTimestamp: String(Date.now()),
    },
    messageAttributes: {},
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: 'arn:aws:sqs:us-east-1:123456789012:orders',
    awsRegion: 'us-east-1',
  };
}

async function count(sql: string, values: unknown[] = []): Promise<number> {
  const { rows } = await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM (${sql}) q`, values);
  return Number(rows[0]?.n);
}

describe('consumer: exactly-once effect on at-least-once delivery', () => {
  it('handles an event delivered three times (redelivery, re-publish, through EventBridge) once', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('consumer-dup'));
    const log = captureLogger();
    const consumer = createConsumer({
      name: 'order-consumer',
      pool: db.pool,
      handlers: orderNotificationHandlers,
      logger: log.logger,
    });
    const envelope = orderEnvelope();

    // 1. First delivery: handled.
    await send(aws.sqs, queue.url, [JSON.stringify(envelope)]);
    const first = await receiveEvent(queue, 1);
    expect(await consumer.handleSqsEvent(first)).toMatchObject({
      processed: 1,
      duplicates: 0,
      failed: 0,
      batchItemFailures: [],
    });
    // The delete is lost (the function timed out after committing, say): the
    // same message comes back once its visibility timeout is over.
    await endVisibility(queue, first, {
      batchItemFailures: [{ itemIdentifier: first.Records[0]!.messageId }],
    });
    const second = await receiveEvent(queue, 1);
    expect(second.Records[0]?.messageId).toBe(first.Records[0]?.messageId);
    expect(second.Records[0]?.attributes.ApproximateReceiveCount).toBe('2');
    const redelivered = await consumer.handleSqsEvent(second);
    expect(redelivered).toMatchObject({ processed: 0, duplicates: 1, failed: 0 });
    expect(await settle(queue, second, redelivered)).toEqual({ deleted: 1, failed: 0 });

    // 2. The relay published it again (it crashed before recording the outcome),
    //    and 3. it also came through the bus: two new messages, same event id.
    await send(aws.sqs, queue.url, [JSON.stringify(envelope), viaEventBridge(envelope)]);
    const third = await receiveEvent(queue, 2);
    const result = await consumer.handleSqsEvent(third);
    expect(result).toMatchObject({ processed: 0, duplicates: 2, failed: 0, batchItemFailures: [] });
    expect(result.outcomes.map((o) => o.eventId)).toEqual([envelope.id, envelope.id]);

    const { rows } = await db.pool.query('SELECT order_id, event_id FROM order_notifications');
    expect(rows).toEqual([{ order_id: envelope.payload.orderId, event_id: envelope.id }]);
    const dedupe = await db.pool.query('SELECT consumer, event_id, event_type FROM processed_events');
    expect(dedupe.rows).toEqual([
      { consumer: 'order-consumer', event_id: envelope.id, event_type: 'order.created' },
    ]);
    const duplicateLines = log.lines.filter((l) => l.message.startsWith('duplicate event skipped'));
    expect(duplicateLines).toHaveLength(3);
    expect(duplicateLines[0]?.extra).toMatchObject({ event_id: envelope.id, event_type: 'order.created' });
  });

  it('lets two deliveries of one event race: one handles it, the other waits and skips it', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('consumer-race'));
    const slow: EventHandler<OrderCreated> = async (event, tx, context) => {
      await tx.query('SELECT pg_sleep(0.3)');
      await notifyOrderCreated(event, tx, context);
    };
    // Two Lambda instances, each with its own consumer and connection.
    const a = createConsumer({ name: 'order-consumer', pool: db.pool, handlers: { 'order.created': slow } });
    const b = createConsumer({ name: 'order-consumer', pool: db.pool, handlers: { 'order.created': slow } });
    const envelope = orderEnvelope();
    await send(aws.sqs, queue.url, [JSON.stringify(envelope), JSON.stringify(envelope)]);
    const { Records } = await receiveEvent(queue, 2);
    const [ra, rb] = await Promise.all([
      a.handleSqsEvent({ Records: [Records[0]!] }),
      b.handleSqsEvent({ Records: [Records[1]!] }),
    ]);
    expect([ra.processed + rb.processed, ra.duplicates + rb.duplicates, ra.failed + rb.failed]).toEqual([
      1, 1, 0,
    ]);
    expect(await count('SELECT * FROM order_notifications')).toBe(1);
  });

  it('dedupes per consumer name: two consumers each handle the event once', async () => {
    const envelope = orderEnvelope();
    const event = { Records: [record(JSON.stringify(envelope))] };
    for (const name of ['billing', 'shipping', 'billing']) {
      await createConsumer({ name, pool: db.pool, handlers: orderNotificationHandlers }).handleSqsEvent(
        event,
      );
    }
    const { rows } = await db.pool.query('SELECT consumer FROM processed_events ORDER BY consumer');
    expect(rows.map((r) => r.consumer)).toEqual(['billing', 'shipping']);
    expect(await count('SELECT * FROM order_notifications')).toBe(2);
  });
});

describe('consumer: partial batch failures', () => {
  it('commits 7 of 10, reports exactly the 2 failed handlers and the malformed record, then retries them', async () => {
    const dlq = await createQueue(aws.sqs, uniqueName('consumer-batch-dlq'));
    const queue = await createQueue(aws.sqs, uniqueName('consumer-batch'), {
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlq.arn, maxReceiveCount: '2' }),
    });
    const envelopes = Array.from({ length: 9 }, () => orderEnvelope());
    const failing = new Set([envelopes[2]!.payload.orderId, envelopes[6]!.payload.orderId]);
    const log = captureLogger();
    const consumer = createConsumer({
      name: 'order-consumer',
      pool: db.pool,
      logger: log.logger,
      handlers: defineHandlers<{ 'order.created': OrderCreated }>({
        'order.created': async (event, tx, context) => {
          // Write first, then fail: the rollback must take the write with it.
          await notifyOrderCreated(event, tx, context);
          if (failing.has(event.payload.orderId) && context.receiveCount === 1) {
            throw new Error('downstream unavailable');
          }
        },
      }),
    });
    const bodies = envelopes.map((e) => JSON.stringify(e));
    bodies.splice(4, 0, '{"id": "not-an-event", "payload": {"card": "4111 1111 1111 1111"'); // truncated JSON
    const messageIds = await send(aws.sqs, queue.url, bodies);

    const first = await receiveEvent(queue, 10);
    expect(first.Records).toHaveLength(10);
    const byBody = new Map(first.Records.map((r) => [r.body, r.messageId]));
    const failedIds = [
      byBody.get(JSON.stringify(envelopes[2])),
      byBody.get(bodies[4]!),
      byBody.get(JSON.stringify(envelopes[6])),
    ];
    const result = await consumer.handleSqsEvent(first);
    expect(result).toMatchObject({ processed: 7, duplicates: 0, failed: 3 });
    expect(result.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual([...failedIds].sort());
    expect(new Set(messageIds)).toEqual(new Set(first.Records.map((r) => r.messageId)));
    expect(await count('SELECT * FROM processed_events')).toBe(7);
    expect(await count('SELECT * FROM order_notifications')).toBe(7);
    expect(await count('SELECT * FROM order_notifications WHERE order_id = ANY($1)', [[...failing]])).toBe(0);

    // One clear line per failure, with the ids and without the payload.
    const errors = log.lines.filter((l) => l.level === 'error');
    expect(errors).toHaveLength(3);
    const malformed = errors.find((l) => l.message.startsWith('malformed message'));
    expect(malformed?.extra).toMatchObject({
      message_id: byBody.get(bodies[4]!),
      reason: expect.stringMatching(/not valid JSON/),
    });
    const failedHandler = errors.find((l) => l.extra.event_id === envelopes[2]!.id);
    expect(failedHandler?.message).toMatch(/event handler failed/);
    expect(failedHandler?.extra).toMatchObject({ event_type: 'order.created', message_id: failedIds[0] });
    expect(JSON.stringify(log.lines)).not.toMatch(/customer-secret|4111 1111/);

    // Lambda deletes what the response did not report; the rest comes back.
    expect(await settle(queue, first, result)).toEqual({ deleted: 7, failed: 3 });
    await endVisibility(queue, first, result);
    const second = await receiveEvent(queue, 3);
    expect(second.Records.map((r) => r.messageId).sort()).toEqual([...failedIds].sort());
    const retried = await consumer.handleSqsEvent(second);
    expect(retried).toMatchObject({ processed: 2, duplicates: 0, failed: 1 });
    expect(retried.batchItemFailures).toEqual([{ itemIdentifier: failedIds[1] }]);
    expect(await count('SELECT * FROM order_notifications')).toBe(9);
    expect(await count('SELECT DISTINCT order_id FROM order_notifications')).toBe(9);

    // The malformed one has used its receives: the redrive policy moves it to the DLQ.
    expect(await settle(queue, second, retried)).toEqual({ deleted: 2, failed: 1 });
    await endVisibility(queue, second, retried);
    expect((await receiveEvent(queue, 1, 2000)).Records).toHaveLength(0);
    const dead = await receiveAll(aws.sqs, dlq.url, 1, 5000);
    expect(dead.map((m) => m.Body)).toEqual([bodies[4]]);
  });

  it('fails records it cannot read, each alone and with the reason', async () => {
    const good = orderEnvelope();
    const shipped = { ...orderEnvelope(), type: 'order.shipped' };
    const log = captureLogger();
    const consumer = createConsumer({
      name: 'strict',
      pool: db.pool,
      handlers: orderNotificationHandlers,
      logger: log.logger,
    });
    const cases = {
      notJson: 'order 42 created',
      notAnEnvelope: '{"hello":"world"}',
      badId: JSON.stringify({ ...orderEnvelope(), id: 'order-42' }),
      noType: JSON.stringify({ ...orderEnvelope(), type: undefined }),
      unknownType: JSON.stringify(shipped),
      prototypeKey: JSON.stringify({ ...orderEnvelope(), type: 'constructor' }),
      foreignEventBridge: JSON.stringify({
        'detail-type': 'Object Created',
        source: 'aws.s3',
        detail: { bucket: {} },
      }),
      good: JSON.stringify(good),
    };
    const records = Object.values(cases).map((body) => record(body));
    const result = await consumer.handleSqsEvent({ Records: records });
    expect(result.processed).toBe(1);
    expect(result.outcomes.map((o) => o.status)).toEqual([...Array(7).fill('malformed'), 'processed']);
    expect(result.batchItemFailures).toEqual(
      records.slice(0, 7).map((r) => ({ itemIdentifier: r.messageId })),
    );
    const reasons = result.outcomes.map((o) => o.error?.message);
    expect(reasons[0]).toBe('body: is not valid JSON (16 characters)');
    expect(reasons[2]).toMatch(/^envelope: not a valid outbox envelope \(id: Invalid GUID\)$/);
    expect(reasons[3]).toMatch(/type: /);
    expect(reasons[4]).toBe('type: no handler for event type "order.shipped" and no fallback handler');
    expect(reasons[5]).toMatch(/no handler for event type "constructor"/);
    expect(reasons[6]).toMatch(/^detail: not a valid outbox envelope/);
    expect(
      result.outcomes.every((o) => o.status === 'processed' || o.error instanceof MalformedMessageError),
    ).toBe(true);
    const unknownLine = log.lines.find((l) => l.extra.message_id === records[4]!.messageId);
    expect(unknownLine?.extra).toMatchObject({ event_id: shipped.id, event_type: 'order.shipped' });
    expect(await count('SELECT * FROM processed_events')).toBe(1);
  });

  it('hands unknown event types to the fallback handler when there is one', async () => {
    const seen: string[] = [];
    const consumer = createConsumer({
      name: 'lenient',
      pool: db.pool,
      handlers: orderNotificationHandlers,
      fallback: async (event) => {
        seen.push(event.type);
      },
    });
    const shipped = { ...orderEnvelope(), type: 'order.shipped' };
    const result = await consumer.handleSqsEvent({ Records: [record(JSON.stringify(shipped))] });
    expect(result).toMatchObject({ processed: 1, failed: 0 });
    expect(seen).toEqual(['order.shipped']);
    const { rows } = await db.pool.query('SELECT event_id, event_type FROM processed_events');
    expect(rows).toEqual([{ event_id: shipped.id, event_type: 'order.shipped' }]);
  });

  it('does not acknowledge a record whose handler swallowed a database error (COMMIT answered ROLLBACK)', async () => {
    const consumer = createConsumer({
      name: 'careless',
      pool: db.pool,
      handlers: {
        'order.created': async (event: Envelope<OrderCreated>, tx) => {
          await notifyOrderCreated(event, tx);
          await tx.query('SELECT 1 / 0').catch(() => {}); // aborts the transaction
        },
      },
    });
    const result = await consumer.handleSqsEvent({ Records: [record(JSON.stringify(orderEnvelope()))] });
    expect(result).toMatchObject({ processed: 0, failed: 1 });
    expect(result.outcomes[0]?.error).toBeInstanceOf(TransactionRolledBackError);
    expect(await count('SELECT * FROM processed_events')).toBe(0);
    expect(await count('SELECT * FROM order_notifications')).toBe(0);
  });

  it('gives back records it has no time left for, and the rest of the batch when the database is down', async () => {
    let left = 3;
    const consumer = createConsumer({
      name: 'hurried',
      pool: db.pool,
      handlers: orderNotificationHandlers,
      safetyMarginMs: 1000,
    });
    const records = Array.from({ length: 5 }, () => record(JSON.stringify(orderEnvelope())));
    const result = await consumer.handleSqsEvent(
      { Records: records },
      { remainingMs: () => (left-- > 0 ? 10_000 : 900) },
    );
    expect(result.outcomes.map((o) => o.status)).toEqual([
      'processed',
      'processed',
      'processed',
      'deferred',
      'deferred',
    ]);
    expect(result.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(
      records.slice(3).map((r) => r.messageId),
    );

    const pg = await import('pg');
    const down = new pg.default.Pool({
      connectionString: 'postgres://nobody@127.0.0.1:1/none',
      connectionTimeoutMillis: 500,
    });
    const log = captureLogger();
    const offline = createConsumer({
      name: 'offline',
      pool: down,
      handlers: orderNotificationHandlers,
      logger: log.logger,
    });
    const outage = await offline.handleSqsEvent({ Records: records });
    await down.end();
    expect(outage.outcomes.map((o) => o.status)).toEqual([
      'failed',
      'deferred',
      'deferred',
      'deferred',
      'deferred',
    ]);
    expect(outage.outcomes[0]?.error).toBeInstanceOf(DatabaseUnavailableError);
    expect(outage.failed).toBe(5);
    // One attempt, not five connection timeouts in a row.
    expect(log.lines.filter((l) => l.level === 'error')).toHaveLength(1);
  });
});

describe('consumer: FIFO queues', () => {
  it('holds back the rest of a message group after a failure, and keeps the group in order on retry', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('consumer-fifo')}.fifo`);
    const a = randomUUID();
    const b = randomUUID();
    // Interleaved: a1 b1 a2 b2 a3 (aggregate = order = message group).
    const plan = [
      { group: a, n: 1 },
      { group: b, n: 1 },
      { group: a, n: 2 },
      { group: b, n: 2 },
      { group: a, n: 3 },
    ];
    const envelopes = plan.map((p) => ({
      ...orderEnvelope(p.group),
      headers: { step: `${p.group === a ? 'a' : 'b'}${p.n}` },
    }));
    const handled: string[] = [];
    const consumer = createConsumer({
      name: 'fifo-consumer',
      pool: db.pool,
      handlers: defineHandlers<{ 'order.created': OrderCreated }>({
        'order.created': async (event, tx, context) => {
          handled.push(event.headers.step!);
          if (event.headers.step === 'a2' && context.receiveCount === 1) throw new Error('a2 fails once');
          await notifyOrderCreated(event, tx, context);
        },
      }),
    });
    await send(
      aws.sqs,
      queue.url,
      envelopes.map((e) => JSON.stringify(e)),
      (i) => ({ group: plan[i]!.group }),
    );

    const first = await receiveEvent(queue, 5);
    expect(first.Records.map((r) => JSON.parse(r.body).headers.step)).toEqual(['a1', 'b1', 'a2', 'b2', 'a3']);
    const result = await consumer.handleSqsEvent(first);
    expect(result.outcomes.map((o) => o.status)).toEqual([
      'processed',
      'processed',
      'failed',
      'processed',
      'blocked',
    ]);
    expect(result.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([
      first.Records[2]!.messageId,
      first.Records[4]!.messageId,
    ]);
    expect(handled).toEqual(['a1', 'b1', 'a2', 'b2']); // a3 was not even tried

    expect(await settle(queue, first, result)).toEqual({ deleted: 3, failed: 2 });
    await endVisibility(queue, first, result);
    const second = await receiveEvent(queue, 2);
    expect(second.Records.map((r) => JSON.parse(r.body).headers.step)).toEqual(['a2', 'a3']);
    expect(await consumer.handleSqsEvent(second)).toMatchObject({ processed: 2, failed: 0 });
    expect(handled).toEqual(['a1', 'b1', 'a2', 'b2', 'a2', 'a3']);
    const { rows } = await db.pool.query(
      `SELECT n.event_id FROM order_notifications n WHERE n.order_id = $1 ORDER BY n.id`,
      [a],
    );
    expect(rows.map((r) => r.event_id)).toEqual([envelopes[0]!.id, envelopes[2]!.id, envelopes[4]!.id]);
  });

  it('does not hold back records of a standard queue that carry a MessageGroupId (fair queues)', async () => {
    const consumer = createConsumer({
      name: 'standard',
      pool: db.pool,
      handlers: {
        'order.created': async (event: Envelope<OrderCreated>) => {
          if (event.headers.fail) throw new Error('fails');
        },
      },
    });
    const group = (r: SQSRecord) => ({ ...r, attributes: { ...r.attributes, MessageGroupId: 'tenant-1' } });
    const records = [
      group(record(JSON.stringify({ ...orderEnvelope(), headers: { fail: 'yes' } }))),
      group(record(JSON.stringify(orderEnvelope()))),
    ];
    const result = await consumer.handleSqsEvent({ Records: records });
    expect(result.outcomes.map((o) => o.status)).toEqual(['failed', 'processed']);
  });
});

describe('consumer: API', () => {
  it('types payloads from the handler map and refuses bad options', () => {
    const handlers = defineHandlers<{ 'order.created': OrderCreated; 'order.cancelled': { reason: string } }>(
      {
        'order.created': async (event) => {
          expectTypeOf(event.payload).toEqualTypeOf<OrderCreated>();
        },
        'order.cancelled': async (event) => {
          expectTypeOf(event.payload.reason).toEqualTypeOf<string>();
        },
      },
    );
    expect(Object.keys(handlers)).toEqual(['order.created', 'order.cancelled']);

    const options = { name: 'c', pool: db.pool, handlers: orderNotificationHandlers };
    expect(() => createConsumer({ ...options, name: '' })).toThrow(ConfigError);
    expect(() => createConsumer({ ...options, name: 'x'.repeat(256) })).toThrow(/at most 255/);
    expect(() => createConsumer({ ...options, handlers: {} })).toThrow(/at least one handler or a fallback/);
    expect(() => createConsumer({ ...options, handlers: { 'order.created': 'nope' } as never })).toThrow(
      /handlers.order.created: expected a function/,
    );
    expect(() => createConsumer({ ...options, fallbak: async () => {} } as never)).toThrow(
      /fallbak: unknown consumer option/,
    );
    expect(() => createConsumer({ ...options, safetyMarginMs: -1 })).toThrow(ConfigError);
  });

  it('refuses an event that is not an SQS event', async () => {
    const consumer = createConsumer({ name: 'c', pool: db.pool, handlers: orderNotificationHandlers });
    await expect(consumer.handleSqsEvent({} as SQSEvent)).rejects.toThrow(/expected an SQS event/);
  });
});
