import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError } from '../errors.js';
import { type OutboxLogger, silentLogger } from '../observer.js';
import type { Relay, RelaySummary } from './relay.js';

export interface RunRelayOptions {
  /** The relay to run; build it as for Lambda (`new Relay({ db, publisher, options, logger })`). */
  relay: Relay;
  /**
   * Stops the runner (wire SIGTERM to it): no claim starts after it fires;
   * the batches in flight are published, their outcomes recorded, and the
   * promise resolves. A relay waiting between empty polls notices within
   * its idle wait (`idleWaitMs`).
   */
  signal: AbortSignal;
  /**
   * Length of one run. Runs follow each other without a pause; at the end of
   * each the summary is logged, the relay's metrics are recorded and the
   * outbox stats read, as after a Lambda invocation. A batch is never cut
   * short by the end of a run (its publish is bounded by the lease only).
   * Default 60 s.
   */
  runMs?: number;
  /** Where run summaries and failures are logged. Default: nowhere. */
  logger?: OutboxLogger;
  /** Called after every run with its summary (flush buffered metrics here). */
  onRun?: (summary: RelaySummary) => void | Promise<void>;
  /**
   * A run that fails (the database unreachable, a connection lost again and
   * again) is logged and followed by another after a wait that doubles from
   * 1 s up to this. Default 30 s.
   */
  maxRetryDelayMs?: number;
}

/** What a runner did from start to stop. */
export interface RelayRunnerSummary {
  runs: number;
  /** Runs that threw (logged, then retried). */
  failedRuns: number;
  claimed: number;
  published: number;
  retried: number;
  deadLettered: number;
  leaseLost: number;
  durationMs: number;
}

function checkMs(options: RunRelayOptions, key: 'runMs' | 'maxRetryDelayMs', min: number) {
  const value = options[key];
  if (value !== undefined && !(Number.isInteger(value) && value >= min)) {
    throw new ConfigError(key, `expected an integer of at least ${min} ms (got ${String(value)})`);
  }
}

/** Resolves after `ms`, or at once when `signal` fires. */
const pause = (ms: number, signal: AbortSignal) => sleep(ms, undefined, { signal }).catch(() => {});

/**
 * One run without a deadline: it ends at the runner's signal or after
 * `runMs`, whichever comes first (both by abort, which lets the batches in
 * flight finish and record their outcomes).
 */
async function oneRun(relay: Relay, signal: AbortSignal, runMs: number): Promise<RelaySummary> {
  const runEnd = new AbortController();
  const endRun = () => runEnd.abort();
  const timer = setTimeout(endRun, runMs);
  signal.addEventListener('abort', endRun, { once: true });
  try {
    const summary = await relay.run({
      remainingMs: () => Number.POSITIVE_INFINITY,
      abortSignal: runEnd.signal,
    });
    // A run that reached its length stopped for time, as a Lambda run does.
    if (summary.stoppedBecause === 'aborted' && !signal.aborted) summary.stoppedBecause = 'time';
    return summary;
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', endRun);
  }
}

/**
 * Runs a relay in a long-lived process (a container on ECS/Fargate or
 * Kubernetes, a plain Node worker) until `signal` fires.
 *
 * There is no invocation deadline outside Lambda, so each run is given an
 * unbounded `remainingMs` (the safety margin never stops it) and ends by
 * abort instead: after `runMs`, or when `signal` fires. Several replicas
 * drain one outbox side by side; their claims skip each other's rows.
 *
 * @example
 * const controller = new AbortController();
 * process.once('SIGTERM', () => controller.abort());
 * const relay = new Relay({ db: pool, publisher, options: { workers: 2 }, logger });
 * await runRelay({ relay, signal: controller.signal, logger });
 * await pool.end();
 */
export async function runRelay(options: RunRelayOptions): Promise<RelayRunnerSummary> {
  checkMs(options, 'runMs', 1_000);
  checkMs(options, 'maxRetryDelayMs', 1);
  const { relay, signal } = options;
  const logger = options.logger ?? silentLogger;
  const runMs = options.runMs ?? 60_000;
  const maxRetryDelayMs = options.maxRetryDelayMs ?? 30_000;
  const started = performance.now();
  const total: RelayRunnerSummary = {
    runs: 0,
    failedRuns: 0,
    claimed: 0,
    published: 0,
    retried: 0,
    deadLettered: 0,
    leaseLost: 0,
    durationMs: 0,
  };
  let retryDelayMs = 1_000;
  logger.info('relay runner started', {
    workers: relay.options.workers,
    batch_size: relay.options.batchSize,
    run_ms: runMs,
  });
  while (!signal.aborted) {
    let summary: RelaySummary;
    try {
      summary = await oneRun(relay, signal, runMs);
    } catch (error) {
      total.failedRuns++;
      logger.error('relay run failed; running again after a pause', {
        error: String(error),
        retry_in_ms: retryDelayMs,
      });
      await pause(retryDelayMs, signal);
      retryDelayMs = Math.min(retryDelayMs * 2, maxRetryDelayMs);
      continue;
    }
    retryDelayMs = 1_000;
    total.runs++;
    for (const key of ['claimed', 'published', 'retried', 'deadLettered', 'leaseLost'] as const) {
      total[key] += summary[key];
    }
    logger.info('relay run finished', { ...summary });
    try {
      await options.onRun?.(summary);
    } catch (error) {
      logger.warn('onRun failed', { error: String(error) });
    }
  }
  total.durationMs = performance.now() - started;
  logger.info('relay runner stopped', { ...total });
  return total;
}
