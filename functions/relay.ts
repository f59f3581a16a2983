import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { SQSClient } from '@aws-sdk/client-sqs';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import pg from 'pg';
import { loadRelayConfig } from '../lib/config/relay-config.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import { listenSignal, sleepSignal } from '../lib/relay/notifier.js';
import { Relay, type RelaySummary } from '../lib/relay/relay.js';
import { databaseConfig } from './shared/database.js';
import { observability } from './shared/observability.js';

// Cold start: validate config (a bad variable fails the init with its name),
// build the AWS clients. The pool is built on first use because reading the
// database secret is asynchronous; it is then reused by warm invocations.
const config = loadRelayConfig();
const { logger, metrics, metricsSink } = observability('outbox-relay');
const sdkOptions = { maxAttempts: 2 };
const sqs = new SQSClient(sdkOptions);
const eventBridge = new EventBridgeClient(sdkOptions);
const publisher = createAwsPublisher({
  routes: config.routes,
  sqs,
  eventBridge,
  source: config.eventSource,
  concurrency: config.concurrency,
});

let relay: Promise<Relay> | undefined;

async function buildRelay(): Promise<Relay> {
  const dbConfig = await databaseConfig();
  const pool = new pg.Pool({ ...dbConfig, max: (config.relay.workers ?? 2) + 1 });
  pool.on('error', (error) => logger.warn('idle database connection failed', { error: String(error) }));
  const workSignal = config.listen ? await listenSignal(dbConfig) : sleepSignal;
  return new Relay({ db: pool, publisher, options: config.relay, logger, metrics: metricsSink, workSignal });
}

/** Scheduled every minute; drains until the time budget is nearly spent. */
export async function relayHandler(_event: unknown, context: Context): Promise<RelaySummary> {
  relay ??= buildRelay().catch((error) => {
    relay = undefined; // retry the setup on the next invocation
    throw error;
  });
  const summary = await (await relay).run({ remainingMs: () => context.getRemainingTimeInMillis() });
  logger.info('relay run finished', { ...summary });
  return summary;
}

export const handler = middy(relayHandler).use(injectLambdaContext(logger)).use(logMetrics(metrics));
