import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type pg from 'pg';
import type { CircuitBreakerOptions } from '../../lib/publish/circuit-breaker.js';
import type { LargePayloadOptions } from '../../lib/publish/claim-check.js';
import { createAwsPublisher } from '../../lib/publish/router.js';
import type { RouteConfig } from '../../lib/publish/routes.js';
import type { RelayOptions } from '../../lib/relay/options.js';
import { Relay } from '../../lib/relay/relay.js';
import { captureLogger, captureMetrics } from './events.js';

/**
 * A relay publishing through the real AWS publisher to the emulator, with
 * test-friendly settings (no safety margin, short idle wait, jitter fixed at
 * 0.5) and its log lines and metrics captured.
 */
export function emulatorRelay(
  pool: pg.Pool,
  clients: { sqs: SQSClient; eventBridge: EventBridgeClient },
  routes: RouteConfig[],
  options: RelayOptions = {},
  extra: {
    circuit?: CircuitBreakerOptions;
    now?: () => number;
    onCall?: () => void;
    largePayloads?: LargePayloadOptions;
    directCalls?: boolean;
  } = {},
) {
  const log = captureLogger();
  const metrics = captureMetrics();
  const publisher = createAwsPublisher({
    routes,
    sqs: clients.sqs,
    eventBridge: clients.eventBridge,
    source: 'outbox',
    concurrency: 4,
    circuit: extra.circuit,
    onCall: extra.onCall,
    largePayloads: extra.largePayloads,
    directCalls: extra.directCalls,
  });
  const relay = new Relay({
    db: pool,
    publisher,
    options: { safetyMarginMs: 0, idleWaitMs: 20, ...options },
    logger: log.logger,
    metrics: metrics.metrics,
    random: () => 0.5,
    now: extra.now,
  });
  return { relay, log, metrics, publisher };
}

/** Runs the relay until a claim finds nothing to do. */
export const drainUntilIdle = (relay: Relay) => relay.run({ remainingMs: () => 60_000, stopWhenIdle: true });

/**
 * A relay with slots (maxRelays 3, one worker) and an idle tail (2 s),
 * publishing to `queueUrl` through the emulator, each call `delayMs` late:
 * the network's round trip, as in AWS (the drain takes its time, the CPU
 * does not).
 */
export function slotRelay(
  pool: pg.Pool,
  clients: { sqs: SQSClient; eventBridge: EventBridgeClient },
  queueUrl: string,
  options: RelayOptions,
  delayMs = 0,
  deps: Partial<ConstructorParameters<typeof Relay>[0]> = {},
) {
  const publisher = createAwsPublisher({
    routes: [{ match: '*', targets: [{ type: 'sqs', queueUrl }] }],
    sqs: clients.sqs,
    eventBridge: clients.eventBridge,
    source: 'outbox',
    concurrency: 4,
  });
  return new Relay({
    db: pool,
    publisher: {
      ...publisher,
      publish: async (...args: Parameters<typeof publisher.publish>) => {
        await new Promise((resolve) => setTimeout(resolve, delayMs));
        return publisher.publish(...args);
      },
    },
    options: { safetyMarginMs: 0, idleWaitMs: 20, workers: 1, maxRelays: 3, idleTailMs: 2_000, ...options },
    logger: captureLogger().logger,
    ...deps,
  });
}
