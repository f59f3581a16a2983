/**
 * One consumer "function" of the chaos suite, in a process of its own so that
 * it can be SIGKILLed in the middle of a batch. It polls the relay's queue as
 * a poller outside Lambda would (ReceiveMessage with every system and message
 * attribute) and hands each batch to the library's real consumer
 * (`createConsumer` from lib/consumer, dedupe in the chaos database's
 * `processed_events`): twice, to two consumers with their own dedupe scopes,
 * `chaos-skip` (`replays: 'skip'`, the default) and `chaos-handle`
 * (`replays: 'handle'`). Each handler writes one `chaos_handled` row in the
 * consumer's transaction. A message is deleted only when both acknowledged
 * it; the others come back after the queue's visibility timeout.
 *
 * The handler throws for a deterministic share of events (by event id) on the
 * first delivery of their message (`receiveCount` 1), so that redelivery is
 * exercised on every run.
 *
 * Before a batch is handled, its messages are reported to the suite over IPC
 * (the raw receipts: lost, duplicates and order are checked on them), then
 * `batch-start`, so the suite can kill the process mid-batch.
 *
 * Env: DATABASE_URL, CHAOS_QUEUE_URL, CHAOS_LOOPS (parallel pollers),
 * CHAOS_VISIBILITY_S, CHAOS_FAIL_PER_MILLE, CHAOS_PROCESS (name),
 * CHAOS_BUCKET (the relay's large-payload bucket), CHAOS_BROKEN_CONSUMER=1
 * (the handler writes outside the consumer's transaction), AWS_*.
 */
import { S3Client } from '@aws-sdk/client-s3';
import {
  DeleteMessageBatchCommand,
  type Message,
  ReceiveMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import pg from 'pg';
import { createConsumer } from '../../lib/consumer/consumer.js';
import type { EventHandler } from '../../lib/consumer/handlers.js';
import { CONSUMERS, type ConsumerReport, failsOnFirstDelivery } from './consumer-protocol.js';
import { EVENT_TYPES } from './producer.js';
import { parseBody } from './receiver.js';

const env = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const queueUrl = env('CHAOS_QUEUE_URL');
const region = env('AWS_REGION');
const loops = Number(process.env.CHAOS_LOOPS ?? 2);
const visibility = Number(process.env.CHAOS_VISIBILITY_S ?? 6);
const failPerMille = Number(process.env.CHAOS_FAIL_PER_MILLE ?? 0);
const processName = process.env.CHAOS_PROCESS ?? `consumer-${process.pid}`;
const send = (report: ConsumerReport) => process.send?.(report);

const pool = new pg.Pool({
  connectionString: env('DATABASE_URL'),
  max: loops + 1,
  application_name: `chaos-consumer-${processName}`,
});
pool.on('error', () => {});
const sdk = {
  maxAttempts: 2,
  requestHandler: { connectionTimeout: 3_000, requestTimeout: 15_000 },
};
const sqs = new SQSClient(sdk);
const s3 = new S3Client({
  ...sdk,
  requestHandler: { connectionTimeout: 3_000, requestTimeout: 30_000 },
  forcePathStyle: true,
});

// --broken-consumer: the handler's write does not go through the consumer's
// transaction, so a failure after it (or a kill) leaves it committed without
// a dedupe row, the bug handled_twice exists to catch.
const broken = process.env.CHAOS_BROKEN_CONSUMER === '1';

const handler: EventHandler = async (event, realTx, context) => {
  const tx = broken ? pool : realTx;
  const failFirst = context.receiveCount <= 1 && failsOnFirstDelivery(event.id, failPerMille);
  if (failFirst && !broken) throw new Error('chaos: the handler fails on the first delivery of this event');
  const payload = event.payload as { n?: unknown; size?: unknown; blob?: unknown };
  const n = Number(event.headers['x-chaos-n']);
  // What reached the handler is what was committed: the counter, and for a
  // large payload (read from S3 by the consumer) its full size.
  const payloadOk =
    Number(payload?.n) === n &&
    (payload?.size === undefined ||
      (typeof payload.blob === 'string' && payload.blob.length === Number(payload.size)));
  const sent = Number(context.record.attributes?.SentTimestamp);
  await tx.query(
    `INSERT INTO chaos_handled
       (consumer, event_id, aggregate_id, n, replay_id, message_id, receive_count, sent_at, payload_ok, process)
     VALUES ($1, $2, $3, $4, $5, $6, $7, to_timestamp($8::double precision / 1000), $9, $10)`,
    [
      context.consumer,
      event.id,
      event.aggregateId,
      n,
      context.replay?.id ?? null,
      context.messageId,
      context.receiveCount,
      Number.isFinite(sent) ? sent : null,
      payloadOk,
      processName,
    ],
  );
  if (failFirst) throw new Error('chaos: the handler fails on the first delivery of this event');
};
const handlers = Object.fromEntries(EVENT_TYPES.map((t) => [t, handler]));
const largePayloads = process.env.CHAOS_BUCKET ? { bucket: process.env.CHAOS_BUCKET, s3 } : undefined;
const consumers = [
  createConsumer({ name: CONSUMERS.skip, pool, handlers, replays: 'skip', largePayloads }),
  createConsumer({ name: CONSUMERS.handle, pool, handlers, replays: 'handle', largePayloads }),
];

let stopping = false;
process.on('SIGTERM', () => {
  stopping = true;
});
process.on('disconnect', () => {
  stopping = true;
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function handleBatch(messages: Message[]): Promise<void> {
  send({
    type: 'received',
    items: messages.map((m) => {
      const parsed = parseBody(m.Body ?? '');
      return {
        eventId: parsed?.eventId ?? '',
        n: parsed?.n ?? Number.NaN,
        aggregateId: parsed?.aggregateId ?? '',
        messageId: m.MessageId ?? '',
        replayId: parsed?.replayId,
      };
    }),
  });
  send({ type: 'batch-start' });
  const failed = new Set<string>();
  let processed = 0;
  let duplicates = 0;
  for (const consumer of consumers) {
    const result = await consumer.handleMessages(messages, { queueUrl, region });
    for (const f of result.batchItemFailures) failed.add(f.itemIdentifier);
    processed += result.processed;
    duplicates += result.duplicates;
  }
  const acknowledged = messages.filter((m) => !failed.has(m.MessageId ?? ''));
  if (acknowledged.length > 0) {
    await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: acknowledged.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
      }),
      { abortSignal: AbortSignal.timeout(20_000) },
    );
  }
  send({ type: 'batch-done', processed, duplicates, failed: failed.size, deleted: acknowledged.length });
}

async function loop(): Promise<void> {
  while (!stopping) {
    try {
      const { Messages = [] } = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 1,
          VisibilityTimeout: visibility,
          MessageSystemAttributeNames: ['All'],
          MessageAttributeNames: ['All'],
        }),
        { abortSignal: AbortSignal.timeout(30_000) },
      );
      if (Messages.length > 0) await handleBatch(Messages);
    } catch (error) {
      // The emulator is paused or the database is away: what was not deleted comes back.
      send({ type: 'error', error: String(error).slice(0, 300) });
      await sleep(500);
    }
  }
}

send({ type: 'ready' });
await Promise.all(Array.from({ length: loops }, () => loop()));
await pool.end().catch(() => {});
process.exit(0);
