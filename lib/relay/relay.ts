import { guardPool } from '../db/connection-guard.js';
import type { Queryable } from '../db/queryable.js';
import { noMetrics, type OutboxLogger, type OutboxMetrics, silentLogger } from '../observer.js';
import type { Publisher } from '../publish/types.js';
import { BatchPipeline } from './batch.js';
import { sleepSignal, type WorkSignal } from './notifier.js';
import { type RelayOptions, type ResolvedRelayOptions, resolveRelayOptions } from './options.js';
import {
  addCounts,
  addSummaries,
  type BatchReport,
  busySummary,
  emptyReport,
  type RelaySummary,
  recordMetrics,
  WaitingSummary,
} from './report.js';
import { drain } from './run-loop.js';
import { afterLook, exitStep, MIN_RUN_MS, wokenIdleTail } from './scale-policy.js';
import { Scaler } from './scaler.js';

export type { BatchReport, RelaySummary } from './report.js';

export interface RelayDeps {
  /** Runs single statements; a `pg.Pool` (each claim and each outcome commits on its own). */
  db: Queryable;
  publisher: Publisher;
  options?: RelayOptions;
  logger?: OutboxLogger;
  metrics?: OutboxMetrics;
  /** Wakes idle loops; a timer unless LISTEN/NOTIFY is wired in. */
  workSignal?: WorkSignal;
  /** Jitter source for backoff. */
  random?: () => number;
  /** Clock for the maximum pending age (tests compress time with it). */
  now?: () => number;
  /**
   * Scale out (with `maxRelays`): starts `count` more relay runs, without
   * waiting for them (the Lambda relay: asynchronous invocations of its own
   * function). Each takes a free slot or returns at once.
   */
  startRelays?: (count: number) => Promise<void>;
}

/** What the parts share: the deps with their defaults, and the target holds' summary. */
export type RelayContext = Required<Omit<RelayDeps, 'options' | 'startRelays'>> &
  Pick<RelayDeps, 'startRelays'> & { options: ResolvedRelayOptions; waiting: WaitingSummary };

export interface RunOptions {
  /** Milliseconds left in the invocation (Lambda's `context.getRemainingTimeInMillis`). */
  remainingMs: () => number;
  /** Return as soon as a claim finds nothing (benchmarks, tests, the CLI). */
  stopWhenIdle?: boolean;
  /**
   * Return at once when the run's first claim finds nothing, without the idle
   * tail; once it has found work, the tail applies as usual. For the
   * schedule's safety-net runs of an elastic relay: an idle tick then costs
   * one claim, while a woken run keeps its tail for the events that follow.
   * Ignored without an idle tail (`idleTailMs: null`, always on).
   */
  leaveIfEmpty?: boolean;
  /**
   * This run's idle tail, instead of the relay's `idleTailMs`: a relay
   * started for a backlog returns when it is idle, even an always-on one.
   */
  idleTailMs?: number;
  /**
   * With `maxRelays` and an idle tail: when a relay already holds a slot,
   * return at once (`busy`) and leave the outbox to it (the last relay to
   * let its slot go looks for events: scale-policy.ts, exitStep). For runs
   * started by a producer's wake or by the schedule, not for a backlog.
   */
  deferToRunning?: boolean;
  /**
   * A producer woke this run (`createRelayWaker`). With slots and an idle
   * tail, its tail is what a new start costs (scale-policy.ts,
   * wokenIdleTail), at most the relay's `idleTailMs`: producers wake the
   * next run when more comes.
   */
  woken?: boolean;
  /**
   * What starting a run costs besides its database work, in ms of this
   * run's time: Lambda's request price over this function's GB-s price
   * (the handler computes it from its memory). Default 0.
   */
  startPriceMs?: number;
  abortSignal?: AbortSignal;
  /** Skip the closing outbox stats query. */
  skipStats?: boolean;
}

/**
 * Drains the outbox. The parts: the batch pipeline (batch.ts: claim →
 * publish → decide → complete), the run loop (run-loop.ts: workers, time
 * budget, idle tail), the scale policy (scale-policy.ts: pure decisions)
 * and its shell (scaler.ts: relay slots, starting relays), the report and
 * the target holds' summary (report.ts). This class wires them and runs the
 * invocation: take a slot, drain, let the slot go, and look once more.
 *
 * @example
 * const relay = new Relay({ db: pool, publisher: createAwsPublisher({...}) });
 * const summary = await relay.run({ remainingMs: () => context.getRemainingTimeInMillis() });
 */
export class Relay {
  readonly options: ResolvedRelayOptions;
  private readonly ctx: RelayContext;
  private readonly pipeline: BatchPipeline;

  constructor(deps: RelayDeps) {
    const options = resolveRelayOptions(deps.options);
    const logger = deps.logger ?? silentLogger;
    guardPool(deps.db, logger); // a dropped idle connection must not crash the process
    const now = deps.now ?? Date.now;
    this.options = options;
    this.ctx = {
      ...deps,
      options,
      logger,
      now,
      metrics: deps.metrics ?? noMetrics,
      workSignal: deps.workSignal ?? sleepSignal,
      random: deps.random ?? Math.random,
      waiting: new WaitingSummary(logger, options.waitingSummaryMs, now),
    };
    this.pipeline = new BatchPipeline(this.ctx);
  }

  /** One claim-publish-complete cycle (see BatchPipeline.processBatch). */
  processBatch(budget: { budgetMs?: number } = {}): Promise<BatchReport> {
    return this.pipeline.processBatch(budget);
  }

  /**
   * Runs `workers` loops side by side until the invocation's remaining time
   * falls under the safety margin (or the outbox is empty, with
   * `stopWhenIdle`, or idle for the tail), then stops claiming, finishes the
   * batches in hand and returns a summary. With `maxRelays`, within a relay
   * slot, scaling out and in as the scale policy decides.
   */
  async run(run: RunOptions): Promise<RelaySummary> {
    const { maxRelays } = this.options;
    if (maxRelays === null) return drain(this.ctx, this.pipeline, run);
    const runStartedAt = performance.now();
    const { logger } = this.ctx;
    const configuredMs = run.idleTailMs ?? this.options.idleTailMs;
    const elastic = configuredMs !== null;
    const scaler = new Scaler(this.ctx, maxRelays, this.pipeline);
    if (run.deferToRunning && elastic && (await scaler.slots()).running > 0) {
      logger.info('a relay is running; this run leaves the outbox to it', { max_relays: maxRelays });
      return busySummary();
    }
    if (!(await scaler.takeSlot(run.remainingMs))) {
      logger.info('every relay slot is held; this run leaves the outbox to them', { max_relays: maxRelays });
      return busySummary();
    }
    const wokenTailMs =
      run.woken && configuredMs !== null
        ? wokenIdleTail({
            configuredMs,
            startPriceMs: run.startPriceMs ?? 0,
            startWorkMs: performance.now() - runStartedAt,
          })
        : undefined;
    let summary: RelaySummary;
    try {
      summary = await drain(this.ctx, this.pipeline, run, { scaler, wokenTailMs });
    } finally {
      await scaler.releaseSlot();
    }
    const step = exitStep({
      stoppedBecause: summary.stoppedBecause,
      elastic,
      lastClaimFull: this.pipeline.lastClaimFull,
    });
    const started = step.successorForBacklog && (await scaler.successorForBacklog());
    const ended = { ...summary, slot: scaler.slot, relaysStarted: scaler.relaysStarted };
    if (started || !step.look || !(await scaler.alone())) return ended;
    return this.lookAsLeaving(run, ended, scaler);
  }

  /** The exit's look (scale-policy.ts: exitStep, afterLook). */
  private async lookAsLeaving(run: RunOptions, ended: RelaySummary, scaler: Scaler): Promise<RelaySummary> {
    const { logger, metrics } = this.ctx;
    const timeLeftMs = () => run.remainingMs() - this.options.safetyMarginMs;
    const canLook = ended.stoppedBecause !== 'time' && timeLeftMs() >= MIN_RUN_MS;
    // A failed look (the database out of reach) leaves what came to the next wake or tick.
    const look = canLook
      ? await this.pipeline.processBatch({ budgetMs: timeLeftMs(), fromStart: true }).catch((error) => {
          logger.warn('could not look for events as this relay left', { error: String(error) });
          return undefined;
        })
      : undefined;
    const step = afterLook({
      claimed: look?.claimed,
      readyLeft: look ? false : await scaler.readyEvents(),
      timeLeftMs: timeLeftMs(),
    });
    let summary = ended;
    if (look && (look.claimed > 0 || look.deadLettered > 0)) {
      summary = { ...ended, batches: ended.batches + 1 };
      addCounts(summary, look);
      recordMetrics(metrics, { ...emptyReport(), ...look, batches: 1, stoppedBecause: 'idle' }, [
        look.durationMs,
      ]);
      logger.info('events came as this relay left; it took them', {
        slot: ended.slot,
        claimed: look.claimed,
      });
    }
    if (step === 'successor') await scaler.startSuccessor(ended.stoppedBecause);
    summary.relaysStarted = scaler.relaysStarted;
    if (step !== 'rerun') return summary;
    const more = await this.run({ ...run, deferToRunning: false, leaveIfEmpty: true });
    return addSummaries(summary, more);
  }
}
