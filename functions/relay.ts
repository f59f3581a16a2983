import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import pg from 'pg';
import { databaseConfig } from 'pg-lambda-outbox/lambda';
import {
  createAwsPublisher,
  isScaleOutEvent,
  isWakeEvent,
  listenSignal,
  loadRelayConfig,
  logTargetChanges,
  type Publisher,
  preferGenericPlans,
  Relay,
  type RelaySummary,
  type RunOptions,
  SCALE_OUT_SOURCE,
  sleepSignal,
} from 'pg-lambda-outbox/relay';
import { observability } from './shared/observability.js';

// Cold start: validate config (a bad variable fails the init with its name)
// and build the AWS clients, reused by warm invocations.
const config = loadRelayConfig();
const { logger, metrics, metricsSink } = observability('outbox-relay');
// Short timeouts: a hung call must fail (and be retried later) well within the
// lease. Without throwOnRequestTimeout the SDK's HTTP handler only logs a
// warning when requestTimeout passes and keeps waiting. Each call also gets
// the relay's deadline as an abort signal (lib/relay/relay.ts).
const sdkOptions = {
  maxAttempts: 2,
  requestHandler: { connectionTimeout: 3_000, requestTimeout: 10_000, throwOnRequestTimeout: true },
};
const sqs = new SQSClient(sdkOptions);
const eventBridge = new EventBridgeClient(sdkOptions);
// The claim check (OUTBOX_LARGE_PAYLOAD_BUCKET): payloads too large for a
// message are PUT to S3. Longer request timeout: a payload may be 10 MiB.
// Path-style addressing against an emulator (AWS_ENDPOINT_URL) only.
const largePayloads = config.largePayloads && {
  ...config.largePayloads,
  s3: new S3Client({
    ...sdkOptions,
    requestHandler: { ...sdkOptions.requestHandler, requestTimeout: 30_000 },
    forcePathStyle: process.env.AWS_ENDPOINT_URL !== undefined,
  }),
};
const publisher = createAwsPublisher({
  routes: config.routes,
  sqs,
  eventBridge,
  largePayloads,
  source: config.eventSource,
  concurrency: config.concurrency,
  directCalls: config.directCalls,
  circuit: config.circuit,
  onTargetChange: logTargetChanges(logger),
});

// Scale out (OUTBOX_MAX_RELAYS): a relay that finds a backlog starts more
// relays by invoking its own function asynchronously; each takes a free
// relay slot or returns at once. The role may invoke only this function.
const lambda = config.relay.maxRelays ? new LambdaClient(sdkOptions) : undefined;
async function startRelays(count: number): Promise<void> {
  const functionName = process.env.AWS_LAMBDA_FUNCTION_NAME;
  if (!lambda || !functionName) return;
  const payload = Buffer.from(JSON.stringify({ source: SCALE_OUT_SOURCE }));
  await Promise.all(
    Array.from({ length: count }, () =>
      lambda.send(
        new InvokeCommand({ FunctionName: functionName, InvocationType: 'Event', Payload: payload }),
      ),
    ),
  );
}

/**
 * Lambda's price of a request in ms of this function's time at `memoryMb`:
 * $0.20 per million requests over the GB-second's price ($0.0000133334 on
 * arm64, the template's architecture; $0.0000166667 on x86_64): 30 ms at
 * 512 MB on arm64. A woken relay waits for more work no longer than a new
 * start costs, this included (scale-policy.ts, wokenIdleTail).
 */
const GB_SECOND_PRICE = process.arch === 'arm64' ? 0.0000133334 : 0.0000166667;
const startPriceMs = (memoryMb: number) =>
  Number.isFinite(memoryMb) && memoryMb > 0 ? (0.2e-6 / (GB_SECOND_PRICE * (memoryMb / 1024))) * 1000 : 0;

/** The idle tail of a relay started for a backlog when the relay has none (always on). */
const SCALE_OUT_IDLE_TAIL_MS = 3_000;

export interface RelayHandlerOptions {
  /** Wraps the AWS publisher (local fault injection, extra instrumentation). */
  wrapPublisher?: (publisher: Publisher) => Publisher;
}

/**
 * Builds the scheduled handler. The pool (and the LISTEN connection, when
 * enabled) is created on the first invocation, because reading the database
 * secret is asynchronous, and reused by warm invocations.
 */
export function createRelayHandler(options: RelayHandlerOptions = {}) {
  const wrapped = options.wrapPublisher ? options.wrapPublisher(publisher) : publisher;
  let relay: Promise<{ relay: Relay; close(): Promise<void> }> | undefined;
  // The connection settings (the secret read once): a run that found every
  // slot held closes its pool, and the next one connects again without
  // another Secrets Manager call. A rejected password (a rotated secret)
  // drops them, and the next run reads the secret again.
  let settings: Promise<pg.PoolConfig> | undefined;

  async function buildRelay(): Promise<{ relay: Relay; close(): Promise<void> }> {
    settings ??= databaseConfig().catch((error) => {
      settings = undefined;
      throw error;
    });
    const dbConfig = await settings;
    const pool = preferGenericPlans(new pg.Pool({ ...dbConfig, max: (config.relay.workers ?? 2) + 1 }));
    pool.on('error', (error) => logger.warn('idle database connection failed', { error: String(error) }));
    const workSignal = config.listen ? await listenSignal(dbConfig) : sleepSignal;
    return {
      relay: new Relay({
        db: pool,
        publisher: wrapped,
        options: config.relay,
        logger,
        metrics: metricsSink,
        workSignal,
        startRelays,
      }),
      close: async () => {
        await workSignal.close();
        await pool.end();
      },
    };
  }

  /** Runs; a password the server rejected forgets the pool and the settings (see `settings`). */
  async function runOrForget(built: { relay: Relay; close(): Promise<void> }, run: RunOptions) {
    try {
      return await built.relay.run(run);
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (code === '28P01' || code === '28000') {
        settings = undefined;
        relay = undefined;
        await built.close().catch(() => {});
      }
      throw error;
    }
  }

  /**
   * Drains until the time budget is nearly spent, or (elastic relay, with an
   * idle tail) until there is no more work, then returns a summary. A run of
   * the schedule that finds nothing at its first claim returns at once; a run
   * woken by a producer keeps its tail from the start.
   */
  return async function relayHandler(event: unknown, context: Context): Promise<RelaySummary> {
    relay ??= buildRelay().catch((error) => {
      relay = undefined; // retry the setup on the next invocation
      throw error;
    });
    const built = await relay;
    const summary = await runOrForget(built, {
      remainingMs: () => context.getRemainingTimeInMillis(),
      // Only the schedule's tick leaves at its first empty claim. A relay
      // started for a backlog keeps its tail too: in ordered mode its first
      // claim can come back empty while another relay's claim holds the
      // same aggregates' heads for a moment.
      leaveIfEmpty: !isWakeEvent(event) && !isScaleOutEvent(event),
      // A producer's wake or a tick while a relay runs: that relay takes the
      // events (and looks for any left behind as it leaves).
      deferToRunning: !isScaleOutEvent(event),
      // Woken: its tail is what a new start costs (the next commit wakes a new run).
      woken: isWakeEvent(event),
      startPriceMs: startPriceMs(Number(context.memoryLimitInMB)),
      // Started for a backlog: gone once it is drained, whatever the mode.
      ...(isScaleOutEvent(event) ? { idleTailMs: config.relay.idleTailMs ?? SCALE_OUT_IDLE_TAIL_MS } : {}),
    });
    if (summary.stoppedBecause === 'busy') {
      // Every relay slot is held by others. This container may stay warm,
      // frozen, for minutes: it lets its database connections go, so that
      // only relays holding a slot hold connections (maxRelays × (workers
      // + 1), the budget checked at cold start); its next run connects anew.
      relay = undefined;
      await built
        .close()
        .catch((error) => logger.warn('could not close the database connections', { error: String(error) }));
    }
    logger.info('relay run finished', { ...summary });
    return summary;
  };
}

export const relayHandler = createRelayHandler();

export const handler = middy(relayHandler).use(injectLambdaContext(logger)).use(logMetrics(metrics));
