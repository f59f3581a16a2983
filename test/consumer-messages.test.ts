// consumer.handleMessages: a poller outside Lambda hands over what the SDK's
// ReceiveMessage returned, from a real queue of the emulator; the consumer
// must treat it as the Lambda records of that queue (FIFO groups in order,
// dedupe, the failures to leave on the queue) and refuse what it cannot.
import { ReceiveMessageCommand, SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import { beforeEach, describe, expect, it } from 'vitest';
import { createConsumer } from '../lib/consumer/consumer.js';
import { defineHandlers } from '../lib/consumer/handlers.js';
import { sqsEventFromMessages } from '../lib/consumer/sdk-messages.js';
import { ValidationError } from '../lib/errors.js';
import { awsClients, createQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';

const db = useTestDatabase();
const aws = awsClients();

beforeEach(async () => {
  await db.pool.query('TRUNCATE processed_events');
});

/** Envelopes as the relay publishes them, one aggregate (one FIFO group) each time. */
function envelopes(aggregateId: string, count: number) {
  return Array.from({ length: count }, (_, i) => ({
    id: crypto.randomUUID(),
    type: 'order.updated',
    aggregateType: 'order',
    aggregateId,
    payload: { step: i },
    headers: {},
    occurredAt: new Date().toISOString(),
  }));
}

async function sendAll(queueUrl: string, bodies: object[], group?: string) {
  await aws.sqs.send(
    new SendMessageBatchCommand({
      QueueUrl: queueUrl,
      Entries: bodies.map((body, i) => ({
        Id: String(i),
        MessageBody: JSON.stringify(body),
        ...(group ? { MessageGroupId: group, MessageDeduplicationId: (body as { id: string }).id } : {}),
      })),
    }),
  );
}

describe('consumer.handleMessages', () => {
  it('handles messages of a FIFO queue named by URL in group order: a failed one holds back the rest of its group, and a redelivery is a duplicate', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('handle-messages')}.fifo`);
    const events = envelopes('o-1', 3);
    await sendAll(queue.url, events, 'order:o-1');
    const seen: number[] = [];
    let failSecond = true;
    const consumer = createConsumer({
      name: 'poller',
      pool: db.pool,
      handlers: defineHandlers({
        'order.updated': async (event) => {
          const { step } = event.payload as { step: number };
          seen.push(step);
          if (step === 1 && failSecond) throw new Error('not yet');
        },
      }),
    });

    const received = await receiveAll(aws.sqs, queue.url, 3);
    expect(received).toHaveLength(3);
    // An emulator's URL names no region: it is given.
    const first = await consumer.handleMessages(received, { queueUrl: queue.url, region: 'us-east-1' });
    expect(first).toMatchObject({ processed: 1, failed: 2 });
    // The failed record and the one behind it in its group stay on the queue.
    expect(first.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([
      received[1]?.MessageId,
      received[2]?.MessageId,
    ]);
    expect(seen).toEqual([0, 1]);

    // Delivered again, all three (the first one too: the poller died before deleting it).
    failSecond = false;
    const again = await consumer.handleMessages(received, { queueUrl: queue.url, region: 'us-east-1' });
    expect(again).toMatchObject({ processed: 2, duplicates: 1, failed: 0, batchItemFailures: [] });
    expect(seen).toEqual([0, 1, 1, 2]);
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM processed_events WHERE consumer = 'poller'`,
    );
    expect(rows[0].n).toBe(3);
  });

  it('refuses, before handling anything, messages received without their system attributes and queues it cannot place', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('handle-messages-bare'));
    await sendAll(queue.url, envelopes('o-2', 1));
    const { Messages = [] } = await aws.sqs.send(
      new ReceiveMessageCommand({ QueueUrl: queue.url, WaitTimeSeconds: 1, VisibilityTimeout: 300 }),
    );
    expect(Messages).toHaveLength(1);
    let handled = 0;
    const consumer = createConsumer({
      name: 'poller',
      pool: db.pool,
      handlers: { 'order.updated': async () => void handled++ },
    });

    const bare = await consumer.handleMessages(Messages, { queueArn: queue.arn }).catch((e: unknown) => e);
    expect(bare).toBeInstanceOf(ValidationError);
    expect((bare as ValidationError).field).toBe('messages[0].Attributes');
    expect((bare as Error).message).toMatch(/MessageSystemAttributeNames: \['All'\]/);

    const noRegion = await consumer
      .handleMessages(Messages, { queueUrl: queue.url })
      .catch((e: unknown) => e);
    expect(noRegion).toBeInstanceOf(ValidationError);
    expect((noRegion as ValidationError).field).toBe('region');
    const notArn = await consumer.handleMessages(Messages, { queueArn: queue.url }).catch((e: unknown) => e);
    expect((notArn as ValidationError).field).toBe('queueArn');
    expect(handled).toBe(0);
    expect((await db.pool.query('SELECT count(*)::int AS n FROM processed_events')).rows[0].n).toBe(0);
  });

  it('reads the region and partition of an AWS queue URL', () => {
    const message = {
      MessageId: 'm-1',
      ReceiptHandle: 'r-1',
      Body: '{}',
      MD5OfBody: 'x',
      Attributes: {
        ApproximateReceiveCount: '1',
        SentTimestamp: '1',
        SenderId: 'A',
        ApproximateFirstReceiveTimestamp: '1',
        MessageGroupId: 'g',
      },
    };
    const arnOf = (queueUrl: string) =>
      sqsEventFromMessages([message], { queueUrl }).Records[0]?.eventSourceARN;
    expect(arnOf('https://sqs.eu-north-1.amazonaws.com/123456789012/orders.fifo')).toBe(
      'arn:aws:sqs:eu-north-1:123456789012:orders.fifo',
    );
    expect(arnOf('https://sqs.cn-north-1.amazonaws.com.cn/123456789012/orders')).toBe(
      'arn:aws-cn:sqs:cn-north-1:123456789012:orders',
    );
    expect(arnOf('https://sqs.us-gov-west-1.amazonaws.com/123456789012/orders')).toBe(
      'arn:aws-us-gov:sqs:us-gov-west-1:123456789012:orders',
    );
    // A FIFO message without its group would lose the group's order.
    const { MessageGroupId: _, ...withoutGroup } = message.Attributes;
    expect(() =>
      sqsEventFromMessages([{ ...message, Attributes: withoutGroup }], {
        queueArn: 'arn:aws:sqs:eu-north-1:123456789012:orders.fifo',
      }),
    ).toThrow(/MessageGroupId missing/);
  });
});
