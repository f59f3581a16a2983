import { createHash, randomUUID } from 'node:crypto';
import { CreateEventBusCommand, PutRuleCommand, PutTargetsCommand } from '@aws-sdk/client-eventbridge';
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import type { SQSEvent } from 'aws-lambda';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createConsumer } from '../lib/consumer/consumer.js';
import { LargePayloadError } from '../lib/consumer/large-payload.js';
import { ValidationError } from '../lib/errors.js';
import { enqueueEvent } from '../lib/outbox/enqueue.js';
import type { Envelope } from '../lib/publish/envelope.js';
import { compactJson } from '../lib/publish/messages.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import { awsClients, createQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { eventRows } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';
import { receiveBatch } from './support/sqs-batch.js';

const db = useTestDatabase();
const aws = awsClients();
let bucket: string;
let queue: { url: string; arn: string };
let busQueue: { url: string; arn: string };
let bus: string;

beforeAll(async () => {
  bucket = uniqueName('outbox-payloads');
  await aws.s3.send(new CreateBucketCommand({ Bucket: bucket }));
  queue = await createQueue(aws.sqs, uniqueName('large-direct'));
  busQueue = await createQueue(aws.sqs, uniqueName('large-bus-target'));
  bus = uniqueName('large-bus');
  await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
  const rule = uniqueName('large-rule');
  await aws.eventBridge.send(
    new PutRuleCommand({
      Name: rule,
      EventBusName: bus,
      EventPattern: JSON.stringify({ source: ['outbox'] }),
    }),
  );
  await aws.eventBridge.send(
    new PutTargetsCommand({ Rule: rule, EventBusName: bus, Targets: [{ Id: 'q', Arn: busQueue.arn }] }),
  );
});
beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, processed_events');
});

/** The emulator's S3 client, counting the calls made through it. */
function countingS3(client: S3Client = aws.s3) {
  const calls: string[] = [];
  return {
    calls,
    s3: {
      send: ((command: { constructor: { name: string } }, options?: unknown) => {
        calls.push(command.constructor.name);
        return (client.send as (c: unknown, o?: unknown) => Promise<unknown>)(command, options);
      }) as S3Client['send'],
    },
  };
}

/** A JSON payload of about `bytes` bytes, with some structure to compare. */
function bigPayload(bytes: number, tag: string) {
  const chunk = 'abcdefghij'.repeat(100);
  const items = Array.from({ length: Math.ceil(bytes / 1010) }, (_, i) => `${i}:${chunk}`);
  return { tag, total: 12.5, nested: { ok: true, list: [1, 2, 3] }, items };
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** Over what SQS and EventBridge accept (1 MiB since 2025-26): such a payload goes through S3. */
const OVER_LIMIT = 1100 * 1024;

async function write(payload: unknown, eventType = 'order.created', options = { largePayloads: true }) {
  return enqueueEvent(db.pool, { aggregateType: 'order', aggregateId: 'o-1', eventType, payload }, options);
}

/** Receives until `count` records arrived (nothing is deleted). */
async function receiveRecords(target: { url: string; arn: string }, count: number): Promise<SQSEvent> {
  const records: SQSEvent['Records'] = [];
  const deadline = Date.now() + 15_000;
  while (records.length < count && Date.now() < deadline) {
    records.push(...(await receiveBatch(aws.sqs, target)).Records);
  }
  return { Records: records };
}

function consumerWith(
  s3: Pick<S3Client, 'send'> | undefined,
  seen: Envelope[],
  store: { prefix?: string; maxBytes?: number } = {},
) {
  return createConsumer({
    name: uniqueName('large-consumer'),
    pool: db.pool,
    handlers: {},
    fallback: async (event) => {
      seen.push(event);
    },
    largePayloads: s3 ? { bucket, s3, ...store } : undefined,
  });
}

const toQueue: RouteConfig[] = [{ match: '*', targets: [{ type: 'sqs', queueUrl: '' }] }];
const routesTo = (url: string): RouteConfig[] => [
  { ...toQueue[0]!, targets: [{ type: 'sqs', queueUrl: url }] },
];

describe('large payloads through S3 (the claim check)', () => {
  it('relays a 5 MiB event to SQS through S3 and the consumer sees its payload; a small one goes inline', async () => {
    const payload = bigPayload(5 * 1024 * 1024, 'big');
    const bigId = await write(payload);
    const smallId = await write({ tag: 'small' });
    const relayS3 = countingS3();
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      routesTo(queue.url),
      {},
      {
        largePayloads: { bucket, s3: relayS3.s3 },
      },
    );
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 2, deadLettered: 0, retried: 0 });
    // One PUT, for the big event only.
    expect(relayS3.calls).toEqual(['PutObjectCommand']);

    const event = await receiveRecords(queue, 2);
    expect(event.Records).toHaveLength(2);
    const bodies = new Map(event.Records.map((r) => [JSON.parse(r.body).id as string, JSON.parse(r.body)]));
    const bigBody = bodies.get(bigId);
    expect(bigBody.payload).toBeUndefined();
    // What the relay publishes: PostgreSQL's text of the jsonb (keys in its order), compacted.
    const { rows } = await db.pool.query('SELECT payload::text AS text FROM outbox_events WHERE id = $1', [
      bigId,
    ]);
    const text = compactJson(rows[0].text);
    expect(bigBody.payloadRef).toEqual({
      s3: { bucket, key: `payloads/${bigId}` },
      bytes: Buffer.byteLength(text),
      sha256: sha256(text),
    });
    expect(bodies.get(smallId).payload).toEqual({ tag: 'small' });
    expect(bodies.get(smallId).payloadRef).toBeUndefined();
    const stored = await aws.s3.send(new GetObjectCommand({ Bucket: bucket, Key: `payloads/${bigId}` }));
    expect(await stored.Body?.transformToString()).toBe(text);

    const consumerS3 = countingS3();
    const seen: Envelope[] = [];
    const result = await consumerWith(consumerS3.s3, seen).handleSqsEvent(event);
    expect(result).toMatchObject({ processed: 2, failed: 0 });
    expect(consumerS3.calls).toEqual(['GetObjectCommand']);
    const big = seen.find((e) => e.id === bigId);
    expect(big?.payload).toEqual(payload);
    expect(big).not.toHaveProperty('payloadRef');
    expect(seen.find((e) => e.id === smallId)?.payload).toEqual({ tag: 'small' });
  });

  it("relays a 300 KiB event via S3 to a bus whose route keeps the old 256 KiB limit; a queue at the default (1 MiB, AWS's limit) gets it inline", async () => {
    const payload = bigPayload(300 * 1024, 'bus');
    const id = await write(payload);
    const relayS3 = countingS3();
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      [
        {
          match: '*',
          targets: [
            { type: 'eventbridge', busName: bus, maxMessageBytes: 256 * 1024 },
            { type: 'sqs', queueUrl: queue.url },
          ],
        },
      ],
      {},
      { largePayloads: { bucket, prefix: 'bus-payloads', s3: relayS3.s3 } },
    );
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 1, deadLettered: 0 });
    expect(relayS3.calls).toEqual(['PutObjectCommand']);

    const fromBus = await receiveRecords(busQueue, 1);
    expect(fromBus.Records).toHaveLength(1);
    const detail = JSON.parse(fromBus.Records[0]!.body).detail;
    expect(detail.payloadRef.s3).toEqual({ bucket, key: `bus-payloads/${id}` });
    expect(detail.payload).toBeUndefined();
    const direct = await receiveRecords(queue, 1);
    expect(JSON.parse(direct.Records[0]!.body).payload).toEqual(payload);

    const seen: Envelope[] = [];
    const result = await consumerWith(aws.s3, seen, { prefix: 'bus-payloads' }).handleSqsEvent(fromBus);
    expect(result).toMatchObject({ processed: 1, failed: 0 });
    expect(result.outcomes[0]?.eventId).toBe(id);
    expect(seen[0]?.payload).toEqual(payload);
  });

  it('ordered, to a FIFO queue and a bus: one PUT for both targets, and the aggregate stays in order', async () => {
    const fifo = await createQueue(aws.sqs, `${uniqueName('large-fifo')}.fifo`);
    const aggregate = (payload: unknown) =>
      enqueueEvent(
        db.pool,
        { aggregateType: 'order', aggregateId: 'o-ordered', eventType: 'order.created', payload },
        { largePayloads: true },
      );
    const bigId = await aggregate(bigPayload(OVER_LIMIT, 'first'));
    const smallId = await aggregate({ tag: 'second' });
    const relayS3 = countingS3();
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      [
        {
          match: '*',
          targets: [
            { type: 'sqs', queueUrl: fifo.url },
            { type: 'eventbridge', busName: bus },
          ],
        },
      ],
      { ordering: 'aggregate' },
      { largePayloads: { bucket, s3: relayS3.s3 } },
    );
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 2, deadLettered: 0, retried: 0 });
    expect(relayS3.calls).toEqual(['PutObjectCommand']);
    const event = await receiveRecords(fifo, 2);
    expect(event.Records.map((r) => JSON.parse(r.body).id)).toEqual([bigId, smallId]);
    const seen: Envelope[] = [];
    expect(await consumerWith(aws.s3, seen).handleSqsEvent(event)).toMatchObject({ processed: 2 });
    expect(seen.map((e) => (e.payload as { tag: string }).tag)).toEqual(['first', 'second']);
  });

  it('fails a record whose object is missing (retryable), or does not match its hash, and handles nothing', async () => {
    const missingId = await write(bigPayload(OVER_LIMIT, 'missing'));
    const alteredId = await write(bigPayload(OVER_LIMIT, 'altered'));
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      routesTo(queue.url),
      {},
      { largePayloads: { bucket, s3: aws.s3 } },
    );
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 2 });
    await aws.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: `payloads/${missingId}` }));
    const original = await aws.s3.send(
      new GetObjectCommand({ Bucket: bucket, Key: `payloads/${alteredId}` }),
    );
    const text = (await original.Body?.transformToString()) as string;
    await aws.s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: `payloads/${alteredId}`,
        Body: text.replace('altered', 'changed'),
      }),
    );

    const event = await receiveRecords(queue, 2);
    const seen: Envelope[] = [];
    const consumer = consumerWith(aws.s3, seen);
    const result = await consumer.handleSqsEvent(event);
    expect(result).toMatchObject({ processed: 0, failed: 2 });
    expect(result.batchItemFailures).toHaveLength(2);
    expect(seen).toEqual([]);
    const byId = new Map(result.outcomes.map((o) => [o.eventId, o]));
    const missing = byId.get(missingId);
    expect(missing?.status).toBe('failed');
    expect(missing?.error).toBeInstanceOf(LargePayloadError);
    expect((missing?.error as LargePayloadError | undefined)?.retryable).toBe(true);
    expect(missing?.error?.message).toMatch(/does not exist \(NoSuchKey\).*retried/);
    expect(byId.get(alteredId)?.error?.message).toMatch(/has SHA-256 [0-9a-f]{64}, the message says/);
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM processed_events');
    expect(rows[0].n).toBe(0);

    // A consumer with no S3 client says what is missing.
    const without = await consumerWith(undefined, seen).handleSqsEvent(event);
    expect(without.failed).toBe(2);
    expect(without.outcomes[0]?.error?.message).toMatch(/no largePayloads option: pass largePayloads/);
  });

  it('skips a duplicate of a processed event before fetching its payload: no GetObject, even after the object expired', async () => {
    const id = await write(bigPayload(OVER_LIMIT, 'once'));
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      routesTo(queue.url),
      {},
      { largePayloads: { bucket, s3: aws.s3 } },
    );
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 1 });
    const event = await receiveRecords(queue, 1);
    expect(JSON.parse(event.Records[0]!.body).payloadRef).toBeDefined();
    const s3 = countingS3();
    const seen: Envelope[] = [];
    const consumer = consumerWith(s3.s3, seen);
    expect(await consumer.handleSqsEvent(event)).toMatchObject({ processed: 1, failed: 0 });
    expect(s3.calls).toEqual(['GetObjectCommand']);

    // A redelivery of the same message: skipped without an S3 call.
    expect(await consumer.handleSqsEvent(event)).toMatchObject({ processed: 0, duplicates: 1, failed: 0 });
    expect(s3.calls).toEqual(['GetObjectCommand']);

    // The bucket's lifecycle expired the object, then the message came back
    // (the queue keeps it longer than a short retention): still a duplicate.
    await aws.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: `payloads/${id}` }));
    const late = await consumer.handleSqsEvent(event);
    expect(late).toMatchObject({ processed: 0, duplicates: 1, failed: 0, batchItemFailures: [] });
    expect(late.outcomes[0]).toMatchObject({ status: 'duplicate', eventId: id });
    expect(s3.calls).toEqual(['GetObjectCommand']);
    expect(seen.map((e) => e.id)).toEqual([id]);
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM processed_events WHERE event_id = $1',
      [id],
    );
    expect(rows[0].n).toBe(1);
  });

  it('a claim-checked event whose handler failed leaves no dedupe row: the retry fetches and handles it; a replay to handle is fetched', async () => {
    const id = await write(bigPayload(OVER_LIMIT, 'retry'));
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      routesTo(queue.url),
      {},
      { largePayloads: { bucket, s3: aws.s3 } },
    );
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 1 });
    const event = await receiveRecords(queue, 1);
    const s3 = countingS3();
    const handled: Envelope[] = [];
    let failNext = true;
    const consumer = createConsumer({
      name: uniqueName('large-retry'),
      pool: db.pool,
      handlers: {},
      replays: 'handle',
      fallback: async (envelope, tx) => {
        await tx.query('SELECT 1');
        if (failNext) {
          failNext = false;
          throw new Error('handler down');
        }
        handled.push(envelope);
      },
      largePayloads: { bucket, s3: s3.s3 },
    });
    expect(await consumer.handleSqsEvent(event)).toMatchObject({ processed: 0, failed: 1 });
    const rows = async () =>
      (await db.pool.query('SELECT count(*)::int AS n FROM processed_events WHERE event_id = $1', [id]))
        .rows[0].n;
    expect(await rows()).toBe(0);
    expect(await consumer.handleSqsEvent(event)).toMatchObject({ processed: 1, failed: 0 });
    expect(await rows()).toBe(1);
    expect(s3.calls).toEqual(['GetObjectCommand', 'GetObjectCommand']);
    expect(handled.map((e) => (e.payload as { tag: string }).tag)).toEqual(['retry']);

    // With replays: 'handle', a replay of the processed event is new work:
    // fetched and handled once, then skipped without a fetch.
    const replay = {
      Records: [
        {
          ...event.Records[0]!,
          messageId: 'replay-1',
          body: JSON.stringify({ ...JSON.parse(event.Records[0]!.body), replayId: randomUUID() }),
        },
      ],
    };
    expect(await consumer.handleSqsEvent(replay)).toMatchObject({ processed: 1, failed: 0 });
    expect(await consumer.handleSqsEvent(replay)).toMatchObject({ processed: 0, duplicates: 1 });
    expect(s3.calls).toHaveLength(3);
    expect(handled).toHaveLength(2);
  });

  it('fetches only the relay bucket and the event’s own key, and bounds the size before reading: a forged pointer fails its record alone', async () => {
    const realId = await write(bigPayload(OVER_LIMIT, 'real'));
    const otherId = await write(bigPayload(OVER_LIMIT, 'other'));
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      routesTo(queue.url),
      {},
      { largePayloads: { bucket, s3: aws.s3 } },
    );
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 2 });
    // An object the consumer's role could read but must never be made to.
    const elsewhere = uniqueName('private');
    await aws.s3.send(new CreateBucketCommand({ Bucket: elsewhere }));
    await aws.s3.send(
      new PutObjectCommand({ Bucket: elsewhere, Key: `payloads/${realId}`, Body: '{"secret":1}' }),
    );

    const { Records } = await receiveRecords(queue, 2);
    const real = Records.find((r) => JSON.parse(r.body).id === realId)!;
    const other = Records.find((r) => JSON.parse(r.body).id === otherId)!;
    const realRef = JSON.parse(real.body).payloadRef;
    const otherRef = JSON.parse(other.body).payloadRef;
    const forged = (messageId: string, ref: object) => ({
      ...real,
      messageId,
      body: JSON.stringify({ ...JSON.parse(real.body), payloadRef: ref }),
    });
    const event = {
      Records: [
        // Another event's object, with that object's true size and hash.
        forged('other-key', otherRef),
        forged('other-bucket', { ...realRef, s3: { bucket: elsewhere, key: realRef.s3.key }, bytes: 12 }),
        forged('too-big', { ...realRef, bytes: 50 * 1024 * 1024 }),
        // The right object, but the message says it is smaller than it is.
        forged('short', { ...realRef, bytes: 1000 }),
        other,
      ],
    };
    const seen: Envelope[] = [];
    const s3 = countingS3();
    const result = await consumerWith(s3.s3, seen, { maxBytes: 2 * 1024 * 1024 }).handleSqsEvent(event);

    expect(result).toMatchObject({ processed: 1, failed: 4 });
    expect(result.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([
      'other-key',
      'other-bucket',
      'too-big',
      'short',
    ]);
    expect(seen.map((e) => e.id)).toEqual([otherId]);
    const reasons = Object.fromEntries(result.outcomes.map((o) => [o.messageId, o.error?.message]));
    expect(reasons['other-key']).toMatch(
      new RegExp(
        `points at s3://${bucket}/payloads/${otherId}.*can only be s3://${bucket}/payloads/${realId}: not fetched`,
      ),
    );
    expect(reasons['other-bucket']).toMatch(new RegExp(`points at s3://${elsewhere}/.*not fetched`));
    expect(reasons['too-big']).toMatch(
      /52428800 bytes by the message, over .*maxBytes \(2097152\): not fetched/,
    );
    expect(reasons.short).toMatch(/is \d+ bytes, the message says 1000/);
    // Refused pointers cost no S3 call; the short one stopped at its Content-Length, the genuine one was read.
    expect(s3.calls).toEqual(['GetObjectCommand', 'GetObjectCommand']);
    const forgedErrors = result.outcomes.filter(
      (o) => o.messageId.startsWith('other-') || o.messageId === 'too-big',
    );
    expect(forgedErrors.map((o) => (o.error as LargePayloadError).retryable)).toEqual([false, false, false]);
  });

  it('refuses largePayloads without its bucket, and the s3 option of old with what replaced it', () => {
    const base = { name: 'c', pool: db.pool, handlers: {}, fallback: async () => {} };
    expect(() => createConsumer({ ...base, largePayloads: { s3: aws.s3 } as never })).toThrow(
      /largePayloads\.bucket/,
    );
    expect(() => createConsumer({ ...base, s3: aws.s3 } as never)).toThrow(/replaced by largePayloads/);
  });

  it('dead-letters an event too large for its target when no bucket is configured', async () => {
    const id = await write(bigPayload(OVER_LIMIT, 'no-bucket'));
    const { relay } = emulatorRelay(db.pool, aws, routesTo(queue.url));
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 0, deadLettered: 1 });
    const [row] = await eventRows(db.pool);
    expect(row?.id).toBe(id);
    expect(row?.dead_lettered_at).not.toBeNull();
    expect(row?.last_error).toMatch(/over the queue's limit of 1048576 bytes.*OUTBOX_LARGE_PAYLOAD_BUCKET/);
  });

  it('retries without spending attempts when the bucket cannot be written', async () => {
    await write(bigPayload(OVER_LIMIT, 'no-such-bucket'));
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      routesTo(queue.url),
      {},
      {
        largePayloads: { bucket: uniqueName('missing-bucket'), s3: aws.s3 },
      },
    );
    const summary = await relay.run({ remainingMs: () => 60_000, stopWhenIdle: true });
    expect(summary).toMatchObject({ published: 0, deadLettered: 0 });
    const [row] = await eventRows(db.pool);
    expect(row?.dead_lettered_at).toBeNull();
    expect(row?.processed_at).toBeNull();
    expect(row?.attempts).toBe(0);
    expect(row?.last_error).toMatch(/storing the payload in S3 failed: config error: NoSuchBucket/);
  });
});

describe('write API: payload size with large payloads', () => {
  it('refuses a payload over the message limit by default, and accepts it with largePayloads', async () => {
    const payload = bigPayload(1100 * 1024, 'x');
    await expect(write(payload, 'order.created', { largePayloads: false })).rejects.toThrow(
      /over the 1048576-byte message limit/,
    );
    await expect(write(payload)).resolves.toMatch(/^[0-9a-f-]{36}$/);
  });

  it('limits payloads to maxPayloadBytes, 10 MiB by default', async () => {
    const write2 = (payload: unknown, options: object) =>
      enqueueEvent(db.pool, { aggregateType: 'a', aggregateId: '1', eventType: 'e', payload }, options);
    await expect(write2(bigPayload(11 * 1024 * 1024, 'x'), { largePayloads: true })).rejects.toThrow(
      /over the limit of 10485760 bytes \(maxPayloadBytes\)/,
    );
    const error = await write2(bigPayload(2 * 1024 * 1024, 'x'), {
      largePayloads: true,
      maxPayloadBytes: 1024 * 1024,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).message).toMatch(
      /events\[0\]\.payload: .*over the limit of 1048576 bytes/,
    );
    await expect(
      write2(bigPayload(2 * 1024 * 1024, 'x'), { largePayloads: true, maxPayloadBytes: 3 * 1024 * 1024 }),
    ).resolves.toBeTypeOf('string');
  });
});
