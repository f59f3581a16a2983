import pg from 'pg';
import { type Env, readVar } from '../config/env.js';
import { loadRelayConfig, type RelayConfig } from '../config/relay-config.js';
import { databaseConfig } from '../db/connection-config.js';
import { preferGenericPlans } from '../db/queryable.js';
import type { OutboxLogger, OutboxMetrics } from '../observer.js';
import { importOptional } from '../optional-dependency.js';
import { logTargetChanges } from '../publish/circuit-breaker.js';
import { type AwsPublisherOptions, createAwsPublisher } from '../publish/router.js';
import * as z from '../zod.js';
import { listenSignal, sleepSignal, type WorkSignal } from './notifier.js';
import { Relay, type RelaySummary } from './relay.js';
import { type RelayRunnerSummary, runRelay } from './runner.js';

export interface StartRelayOptions {
  /** Stops the relay (wire SIGTERM and SIGINT to it); see {@link runRelay}. */
  signal: AbortSignal;
  /** The relay's variables (`OUTBOX_*`, `DATABASE_*`). Default `process.env`. */
  env?: Env;
  /** Default: JSON lines on stdout at `LOG_LEVEL` (default `info`), see {@link jsonLogger}. */
  logger?: OutboxLogger;
  metrics?: OutboxMetrics;
  /** Length of one run (summary, metrics, stats). Default 60 s. */
  runMs?: number;
  /** After every run (flush buffered metrics here). */
  onRun?: (summary: RelaySummary) => void | Promise<void>;
}

/**
 * Short timeouts, as in the Lambda relay: a hung call must fail (and be
 * retried later) well within the lease. Without throwOnRequestTimeout the
 * SDK's HTTP handler only logs a warning when requestTimeout passes.
 */
const SDK_OPTIONS = {
  maxAttempts: 2,
  requestHandler: { connectionTimeout: 3_000, requestTimeout: 10_000, throwOnRequestTimeout: true },
};

type Destroyable = { destroy(): void };

/**
 * The SDK clients the routes need, and only those: a service whose routes
 * name only SQS queues needs no EventBridge package installed.
 */
async function awsClients(config: RelayConfig, env: Env) {
  const types = new Set(config.routes.flatMap((r) => r.targets.map((t) => t.type)));
  const built: Destroyable[] = [];
  let sqs: AwsPublisherOptions['sqs'];
  let eventBridge: AwsPublisherOptions['eventBridge'];
  if (types.has('sqs')) {
    const { SQSClient } = await importOptional(
      '@aws-sdk/client-sqs',
      'OUTBOX_ROUTES',
      () => import('@aws-sdk/client-sqs'),
    );
    const client = new SQSClient(SDK_OPTIONS);
    built.push(client);
    sqs = client;
  }
  if (types.has('eventbridge')) {
    const { EventBridgeClient } = await importOptional(
      '@aws-sdk/client-eventbridge',
      'OUTBOX_ROUTES',
      () => import('@aws-sdk/client-eventbridge'),
    );
    const client = new EventBridgeClient(SDK_OPTIONS);
    built.push(client);
    eventBridge = client;
  }
  let largePayloads: AwsPublisherOptions['largePayloads'];
  if (config.largePayloads) {
    const { S3Client } = await importOptional(
      '@aws-sdk/client-s3',
      'OUTBOX_LARGE_PAYLOAD_BUCKET',
      () => import('@aws-sdk/client-s3'),
    );
    // A payload may be 10 MiB: a longer request timeout. Path-style
    // addressing against an emulator (AWS_ENDPOINT_URL) only.
    const s3 = new S3Client({
      ...SDK_OPTIONS,
      requestHandler: { ...SDK_OPTIONS.requestHandler, requestTimeout: 30_000 },
      forcePathStyle: env.AWS_ENDPOINT_URL !== undefined,
    });
    built.push(s3);
    largePayloads = { ...config.largePayloads, s3 };
  }
  return {
    sqs,
    eventBridge,
    largePayloads,
    destroy: () => {
      for (const client of built) client.destroy();
    },
  };
}

/** A wait between empty polls that ends at once when the relay is told to stop. */
function stoppable(inner: WorkSignal, signal: AbortSignal): WorkSignal {
  return {
    wait: (ms) =>
      signal.aborted
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            const done = () => {
              signal.removeEventListener('abort', done);
              resolve();
            };
            signal.addEventListener('abort', done, { once: true });
            inner.wait(ms).then(done, done);
          }),
    close: () => inner.close(),
  };
}

/**
 * Runs the relay in a container from the same environment the Lambda relay
 * reads (`loadRelayConfig`: `OUTBOX_ROUTES`, `OUTBOX_*`; `databaseConfig`:
 * `DATABASE_URL` or `DATABASE_SECRET_ARN`, TLS and IAM auth), until `signal`
 * fires; then finishes the batches in flight, closes the pool and the AWS
 * clients and resolves. AWS credentials and region come from the SDK's
 * default chain (`AWS_REGION`, the task role, `AWS_ENDPOINT_URL`).
 *
 * The pool has `OUTBOX_WORKERS + 1` connections (one per worker, one for the
 * closing stats); with `OUTBOX_LISTEN=true` one more is held for LISTEN.
 * A bad variable throws a ConfigError naming it, before anything connects.
 *
 * @example
 * const controller = new AbortController();
 * for (const s of ['SIGTERM', 'SIGINT']) process.once(s, () => controller.abort());
 * await startRelayFromEnv({ signal: controller.signal });
 */
export async function startRelayFromEnv(options: StartRelayOptions): Promise<RelayRunnerSummary> {
  const env = options.env ?? process.env;
  const logger = options.logger ?? jsonLogger(env);
  const config = loadRelayConfig(env);
  const dbConfig = await databaseConfig(env);
  const clients = await awsClients(config, env);
  const pool = preferGenericPlans(
    new pg.Pool({
      ...dbConfig,
      application_name: 'pg-lambda-outbox-relay',
      max: (config.relay.workers ?? 2) + 1,
    }),
  );
  pool.on('error', (error) => logger.warn('idle database connection failed', { error: String(error) }));
  let workSignal: WorkSignal = sleepSignal;
  try {
    if (config.listen) workSignal = await listenSignal(dbConfig, { logger });
    const publisher = createAwsPublisher({
      routes: config.routes,
      sqs: clients.sqs,
      eventBridge: clients.eventBridge,
      largePayloads: clients.largePayloads,
      source: config.eventSource,
      concurrency: config.concurrency,
      circuit: config.circuit,
      onTargetChange: logTargetChanges(logger),
    });
    const relay = new Relay({
      db: pool,
      publisher,
      options: config.relay,
      logger,
      ...(options.metrics ? { metrics: options.metrics } : {}),
      workSignal: stoppable(workSignal, options.signal),
    });
    return await runRelay({
      relay,
      signal: options.signal,
      logger,
      ...(options.runMs === undefined ? {} : { runMs: options.runMs }),
      ...(options.onRun ? { onRun: options.onRun } : {}),
    });
  } finally {
    await workSignal.close();
    await pool.end();
    clients.destroy();
  }
}

const LEVELS = ['debug', 'info', 'warn', 'error'] as const;

/**
 * A logger writing one JSON object per line to stdout (what container log
 * drivers and CloudWatch Logs expect), at `LOG_LEVEL` (`debug`, `info`,
 * `warn`, `error`; default `info`). Pass your own (Powertools Logger, pino)
 * to {@link startRelayFromEnv} instead if you have one.
 */
export function jsonLogger(env: Env = process.env): OutboxLogger {
  const min = LEVELS.indexOf(readVar(env, 'LOG_LEVEL', z.enum(LEVELS).default('info')));
  const write =
    (level: (typeof LEVELS)[number]) =>
    (message: string, ...extra: Array<Record<string, unknown>>) => {
      if (LEVELS.indexOf(level) < min) return;
      const line = { level: level.toUpperCase(), message, timestamp: new Date().toISOString() };
      process.stdout.write(`${JSON.stringify(Object.assign(line, ...extra), errorJson)}\n`);
    };
  return { debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') };
}

function errorJson(_key: string, value: unknown): unknown {
  return value instanceof Error ? { name: value.name, message: value.message, stack: value.stack } : value;
}
