import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { beforeEach, describe, expect, it } from 'vitest';
import { parseRoutes } from '../lib/config/relay-config.js';
import { enqueueEvents } from '../lib/outbox/enqueue.js';
import type { OutboxEvent } from '../lib/outbox/types.js';
import { EVENTBRIDGE_MAX_ENTRY_BYTES, SQS_MAX_MESSAGE_BYTES } from '../lib/publish/limits.js';
import { safeGroupId, sqsMessage } from '../lib/publish/messages.js';
import { awsClients, createQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

/**
 * Fair queues (SQS, 2025): a standard queue tells tenants apart by
 * MessageGroupId. A route's `messageGroup` sends one, taken from the
 * aggregate type, the aggregate id or a header, made safe for SQS (1 to 128
 * printable ASCII characters, else `sha256:<hex>`). And today's limits: 1 MiB
 * per message and per call, what SQS and EventBridge accept.
 */
const db = useTestDatabase();
const aws = awsClients();

const event = (over: Partial<OutboxEvent> = {}): OutboxEvent => ({
  id: '0b6a4a3e-7d7e-4c55-9d0b-6f0e6c1a0001',
  seq: '1',
  aggregateType: 'order',
  aggregateId: 'o-1',
  eventType: 'order.created',
  payload: { n: 1 },
  payloadJson: '{"n": 1}',
  headers: {},
  createdAt: new Date('2026-01-29T00:00:00Z'),
  attempts: 1,
  deliveredTargets: [],
  ...over,
});

const routes = (target: object) => JSON.stringify([{ match: '*', targets: [target] }]);
const queueUrl = 'https://sqs.eu-north-1.amazonaws.com/123456789012/orders';

describe('messageGroup: the route setting', () => {
  it('takes aggregateType, aggregateId or { header } on a standard queue', () => {
    for (const messageGroup of ['aggregateType', 'aggregateId', { header: 'tenant-id' }]) {
      const [route] = parseRoutes(routes({ type: 'sqs', queueUrl, messageGroup }), 'OUTBOX_ROUTES');
      expect(route?.targets[0]).toMatchObject({ messageGroup });
    }
  });

  it('refuses it on a FIFO queue, and a value it does not know, naming the field and what it takes', () => {
    expect(() =>
      parseRoutes(
        routes({ type: 'sqs', queueUrl: `${queueUrl}.fifo`, messageGroup: 'aggregateId' }),
        'OUTBOX_ROUTES',
      ),
    ).toThrow(
      /^OUTBOX_ROUTES: 0\.targets\.0\.messageGroup: is for standard queues \(fair queues\); a FIFO queue \(\.fifo\) already groups by aggregate/,
    );
    for (const messageGroup of ['tenant', { header: 'tenant-id', fallback: 'x' }]) {
      expect(() => parseRoutes(routes({ type: 'sqs', queueUrl, messageGroup }), 'OUTBOX_ROUTES')).toThrow(
        /^OUTBOX_ROUTES: 0\.targets\.0\.messageGroup: expected 'aggregateType', 'aggregateId' or \{ "header": "<header name>" \}/,
      );
    }
    expect(() =>
      parseRoutes(routes({ type: 'sqs', queueUrl, messageGroup: { header: '' } }), 'OUTBOX_ROUTES'),
    ).toThrow(/^OUTBOX_ROUTES: 0\.targets\.0\.messageGroup\.header: expected the name of an event header/);
    expect(() =>
      parseRoutes(
        routes({ type: 'eventbridge', busName: 'b', messageGroup: 'aggregateId' }),
        'OUTBOX_ROUTES',
      ),
    ).toThrow(/messageGroup/);
  });

  it('limits: 1 MiB at most per target, on queues and buses; lower is allowed', () => {
    expect(SQS_MAX_MESSAGE_BYTES).toBe(1_048_576);
    expect(EVENTBRIDGE_MAX_ENTRY_BYTES).toBe(1_048_576);
    const [bus] = parseRoutes(routes({ type: 'eventbridge', busName: 'b', maxMessageBytes: 262_144 }));
    expect(bus?.targets[0]).toMatchObject({ maxMessageBytes: 262_144 });
    expect(() =>
      parseRoutes(routes({ type: 'sqs', queueUrl, maxMessageBytes: 1_048_577 }), 'OUTBOX_ROUTES'),
    ).toThrow(
      /^OUTBOX_ROUTES: 0\.targets\.0\.maxMessageBytes: expected a whole number of bytes from 1024 to 1048576/,
    );
  });
});

describe('MessageGroupId values', () => {
  it('from the aggregate or a header; none when the header is missing or empty; none without the setting', () => {
    const e = event({ aggregateType: 'tenant', aggregateId: 'acme', headers: { 'tenant-id': 'acme-42' } });
    const group = (g?: Parameters<typeof sqsMessage>[1]['group']) =>
      sqsMessage(e, { fifo: false, group: g }).entry.MessageGroupId;
    expect(group('aggregateType')).toBe('tenant');
    expect(group('aggregateId')).toBe('acme');
    expect(group({ header: 'tenant-id' })).toBe('acme-42');
    expect(group({ header: 'Tenant-Id' })).toBeUndefined();
    expect(
      sqsMessage(event({ headers: { 'tenant-id': '' } }), { fifo: false, group: { header: 'tenant-id' } })
        .entry,
    ).not.toHaveProperty('MessageGroupId');
    expect(group(undefined)).toBeUndefined();
    // FIFO queues keep grouping by aggregate, whatever the setting.
    expect(sqsMessage(e, { fifo: true, group: 'aggregateType' }).entry.MessageGroupId).toBe('tenant:acme');
    // Not counted in the message's size, as SQS does not count it.
    expect(sqsMessage(e, { fifo: false, group: 'aggregateId' }).bytes).toBe(
      sqsMessage(e, { fifo: false }).bytes,
    );
  });

  it('kept when 1 to 128 printable ASCII characters, else hashed (never truncated: long ids sharing a prefix stay apart)', () => {
    const max = `${'a'.repeat(127)}!`;
    expect(safeGroupId(max)).toBe(max);
    const long1 = `${'t'.repeat(128)}-1`;
    const long2 = `${'t'.repeat(128)}-2`;
    for (const key of [long1, 'tenant with spaces', 'kund-åäö', 'tab\there']) {
      expect(safeGroupId(key)).toMatch(/^sha256:[0-9a-f]{64}$/);
    }
    expect(safeGroupId(long1)).not.toBe(safeGroupId(long2));
    expect(safeGroupId(long1)).toBe(safeGroupId(long1));
  });
});

describe('through the emulator (moto)', () => {
  beforeEach(async () => {
    await db.pool.query('TRUNCATE outbox_events');
  });

  it('a standard queue receives each tenant header as MessageGroupId, a hashed one when unsafe, none without the header', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('fair'));
    const long = `tenant-${'x'.repeat(200)}`;
    const ids = await enqueueEvents(db.pool, [
      {
        aggregateType: 'order',
        aggregateId: 'o-1',
        eventType: 'order.created',
        payload: {},
        headers: { 'tenant-id': 'acme' },
      },
      {
        aggregateType: 'order',
        aggregateId: 'o-2',
        eventType: 'order.created',
        payload: {},
        headers: { 'tenant-id': 'globex' },
      },
      {
        aggregateType: 'order',
        aggregateId: 'o-3',
        eventType: 'order.created',
        payload: {},
        headers: { 'tenant-id': long },
      },
      { aggregateType: 'order', aggregateId: 'o-4', eventType: 'order.created', payload: {} },
    ]);
    const { relay } = emulatorRelay(db.pool, aws, [
      { match: '*', targets: [{ type: 'sqs', queueUrl: queue.url, messageGroup: { header: 'tenant-id' } }] },
    ]);
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 4, deadLettered: 0 });
    const messages = await receiveAll(aws.sqs, queue.url, 4);
    const groups = Object.fromEntries(
      messages.map((m) => [JSON.parse(m.Body ?? '{}').id, m.Attributes?.MessageGroupId ?? null]),
    );
    expect(groups).toEqual({
      [ids[0]!]: 'acme',
      [ids[1]!]: 'globex',
      [ids[2]!]: safeGroupId(long),
      [ids[3]!]: null,
    });
  });

  it("publishes a message of almost 1 MiB inline (no claim check) to the emulator's standard queue, whose limit is 1 MiB too", async () => {
    const queue = await createQueue(aws.sqs, uniqueName('one-mib'));
    const attributes = await aws.sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: queue.url, AttributeNames: ['MaximumMessageSize'] }),
    );
    expect(attributes.Attributes?.MaximumMessageSize).toBe('1048576');
    const payload = { blob: 'x'.repeat(1_000_000) };
    const [id] = await enqueueEvents(
      db.pool,
      [{ aggregateType: 'order', aggregateId: 'big', eventType: 'order.created', payload }],
      { maxMessageBytes: SQS_MAX_MESSAGE_BYTES },
    );
    const { relay } = emulatorRelay(db.pool, aws, [
      { match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] },
    ]);
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 1, deadLettered: 0 });
    const [message] = await receiveAll(aws.sqs, queue.url, 1);
    const body = JSON.parse(message?.Body ?? '{}');
    expect(body.id).toBe(id);
    expect(body.payload).toEqual(payload);
  });
});
