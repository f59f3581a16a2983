import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import { S3Client } from '@aws-sdk/client-s3';
import middy from '@middy/core';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import pg from 'pg';
import { type Consumer, createConsumer } from 'pg-lambda-outbox/consumer';
import { databaseConfig, largePayloadVars, readVar, schemaVar } from 'pg-lambda-outbox/lambda';
import { z } from 'zod';
// The reference stack's application code: your own handlers go here.
import { orderNotificationHandlers } from '../lib/example/order-notifications.js';
import { observability } from './shared/observability.js';

// Cold start: validate config (a bad variable fails the init with its name).
// The database secret is read and the pool's connection opened during the
// init too, in the background (buildConsumer below); warm invocations reuse them.
const consumerName = readVar(
  process.env,
  'CONSUMER_NAME',
  z.string().max(255, 'expected a consumer name of at most 255 characters').default('order-consumer'),
);
// Replays (an operator republished events): `skip` deduplicates them as
// redeliveries; `handle` handles each replay once (docs/consumer.md, "Replays").
const replays = readVar(
  process.env,
  'CONSUMER_REPLAYS',
  z.enum(['skip', 'handle'], { error: "expected 'skip' or 'handle'" }).default('skip'),
);
const { logger, metrics } = observability('outbox-consumer');
// The claim check: with OUTBOX_LARGE_PAYLOAD_BUCKET set (the relay stores
// payloads too large for a message there, under OUTBOX_LARGE_PAYLOAD_PREFIX),
// payloads are fetched from that bucket and prefix only.
// Path-style addressing against an emulator (AWS_ENDPOINT_URL) only.
const payloadStore = largePayloadVars(process.env);
const largePayloads = payloadStore && {
  ...payloadStore,
  s3: new S3Client({
    maxAttempts: 3,
    requestHandler: { connectionTimeout: 3_000, requestTimeout: 30_000, throwOnRequestTimeout: true },
    forcePathStyle: process.env.AWS_ENDPOINT_URL !== undefined,
  }),
};

let consumer: Promise<Consumer> | undefined;

async function buildConsumer(): Promise<Consumer> {
  const dbConfig = await databaseConfig();
  // Records are handled one after another: one connection per instance.
  // createConsumer guards the pool: a dropped idle connection is logged, not
  // an uncaught exception that would kill the runtime.
  const pool = new pg.Pool({ ...dbConfig, max: 1 });
  const built = createConsumer({
    name: consumerName,
    pool,
    handlers: orderNotificationHandlers,
    logger,
    replays,
    largePayloads,
    schema: schemaVar(process.env),
  });
  // Open the connection now, not in the first record's transaction (which
  // waits for it). If the database cannot be reached yet, the records try
  // again and fail alone, as they would without this.
  pool.connect().then(
    (client) => client.release(),
    (error: Error) => logger.warn('could not connect to the database yet', { error: String(error) }),
  );
  return built;
}

/** The consumer, set up once; a set-up that failed is tried again by the next invocation. */
function consumerReady(): Promise<Consumer> {
  consumer ??= buildConsumer().catch((error) => {
    consumer = undefined; // retry the setup on the next invocation
    throw error;
  });
  return consumer;
}

// Set up during the init: a cold start's first batch finds the secret read
// and the connection open or on its way. A set-up that fails here is tried
// again, and reported, by the first invocation.
consumerReady().catch(() => {});

/**
 * SQS-triggered (ReportBatchItemFailures): handles each record once per
 * consumer name and reports the records to retry. Throws only when the
 * consumer cannot be set up; Lambda then retries the whole batch.
 */
export async function consumerHandler(event: SQSEvent, context: Context): Promise<SQSBatchResponse> {
  // The time left bounds every record: a record stuck on a lock is cut off
  // (its statement_timeout is the time left minus the safety margin) and
  // retried alone, instead of the Lambda timeout failing the whole batch.
  const result = await (await consumerReady()).handleSqsEvent(event, {
    remainingMs: () => context.getRemainingTimeInMillis(),
  });
  metrics.addMetric('Processed', MetricUnit.Count, result.processed);
  metrics.addMetric('Duplicates', MetricUnit.Count, result.duplicates);
  metrics.addMetric('Failed', MetricUnit.Count, result.failed);
  logger.info('batch handled', {
    records: event.Records.length,
    processed: result.processed,
    duplicates: result.duplicates,
    failed: result.failed,
  });
  // Only the partial batch response: Lambda reads nothing else.
  return { batchItemFailures: result.batchItemFailures };
}

export const handler = middy(consumerHandler).use(injectLambdaContext(logger)).use(logMetrics(metrics));
