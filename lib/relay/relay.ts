import { randomUUID } from 'node:crypto';
import { guardPool } from '../db/connection-guard.js';
import type { Queryable } from '../db/queryable.js';
import { noMetrics, type OutboxLogger, type OutboxMetrics, silentLogger } from '../observer.js';
import type { Publisher } from '../publish/types.js';
import { relaySlotState, releaseRelaySlot } from '../sql/relay-slots.js';
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
} from './report.js';
import { drain, type LoopDeps } from './run-loop.js';
import type { RunOptions } from './run-options.js';
import { afterLook, exitStep, MIN_RUN_MS, wokenIdleTail } from './scale-policy.js';
import { type HeldSlot, Scaler } from './scaler.js';
import { WaitingSummary } from './waiting.js';

export type { BatchReport, RelaySummary } from './report.js';
export type { RunOptions } from './run-options.js';

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

/**
 * Drains the outbox. The parts: the batch pipeline (batch.ts: claim →
 * publish → decide → complete), the run loop (run-loop.ts: workers, time
 * budget, idle tail), the scale policy (scale-policy.ts: pure decisions)
 * and its shell (scaler.ts: relay slots, starting relays), the target
 * holds' summary (waiting.ts). This class wires them and runs the
 * invocation: take a slot, drain, let the slot go, and look once more.
 *
 * @example
 * const relay = new Relay({ db: pool, publisher: createAwsPublisher({...}) });
 * const summary = await relay.run({ remainingMs: () => context.getRemainingTimeInMillis() });
 */
export class Relay {
  readonly options: ResolvedRelayOptions;
  private readonly logger: OutboxLogger;
  private readonly pipeline: BatchPipeline;
  private readonly loop: LoopDeps;

  constructor(private readonly deps: RelayDeps) {
    this.options = resolveRelayOptions(deps.options);
    this.logger = deps.logger ?? silentLogger;
    guardPool(deps.db, this.logger); // a dropped idle connection must not crash the process
    const now = deps.now ?? Date.now;
    const waiting = new WaitingSummary(this.logger, this.options.waitingSummaryMs, now);
    this.pipeline = new BatchPipeline({
      db: deps.db,
      publisher: deps.publisher,
      options: this.options,
      logger: this.logger,
      waiting,
      now,
      random: deps.random ?? Math.random,
    });
    this.loop = {
      db: deps.db,
      pipeline: this.pipeline,
      options: this.options,
      logger: this.logger,
      metrics: deps.metrics ?? noMetrics,
      workSignal: deps.workSignal ?? sleepSignal,
      waiting,
    };
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
    const maxRelays = this.options.maxRelays;
    if (maxRelays === null) return drain(this.loop, run);
    const runStartedAt = performance.now();
    const configuredTail = run.idleTailMs ?? this.options.idleTailMs;
    const elastic = configuredTail !== null;
    const { db } = this.deps;
    const options = this.options;
    if (run.deferToRunning && elastic) {
      const { running } = await relaySlotState(this.deps.db, { maxRelays, schema: this.options.schema });
      if (running > 0) {
        this.logger.info('a relay is running; this run leaves the outbox to it', { max_relays: maxRelays });
        return busySummary();
      }
    }
    const scaler = new Scaler({
      db,
      options: { ...options, maxRelays },
      logger: this.logger,
      startRelays: this.deps.startRelays,
      lagMs: () => this.pipeline.lastLagMs,
    });
    const held: HeldSlot = { holder: randomUUID(), slot: -1 };
    const slot = await scaler.takeSlot(held.holder, run.remainingMs);
    if (slot === undefined) {
      this.logger.info('every relay slot is held; this run leaves the outbox to them', {
        max_relays: maxRelays,
      });
      return busySummary();
    }
    held.slot = slot;
    const tail =
      run.woken && configuredTail !== null
        ? wokenIdleTail({
            configuredMs: configuredTail,
            startPriceMs: run.startPriceMs ?? 0,
            startWorkMs: performance.now() - runStartedAt,
          })
        : run.idleTailMs;
    let summary: RelaySummary;
    try {
      summary = await drain(
        this.loop,
        { ...run, ...(tail === undefined ? {} : { idleTailMs: tail }) },
        { scaler, held, retryTailMs: configuredTail },
      );
    } finally {
      await releaseRelaySlot(db, slot, held.holder, options.schema).catch((error) =>
        // It frees itself when the run's budget ends.
        this.logger.warn('could not release the relay slot', { slot, error: String(error) }),
      );
    }
    const ended = { ...summary, slot, relaysStarted: scaler.relaysStarted };
    const step = exitStep({
      stoppedBecause: summary.stoppedBecause,
      elastic,
      lastClaimFull: this.pipeline.lastClaimFull,
    });
    const before = scaler.relaysStarted;
    if (step.successorForBacklog) await scaler.successorForBacklog();
    const started = scaler.relaysStarted > before;
    if (started || !step.look || !(await scaler.alone()))
      return { ...ended, relaysStarted: scaler.relaysStarted };
    return this.lookAsLeaving(run, ended, scaler);
  }

  /**
   * The exit's look (scale-policy.ts, exitStep): with the slot released
   * and no relay running, one claim for events committed while the slot
   * was held; if it found any, run again (or, short of time, start a
   * successor).
   */
  private async lookAsLeaving(run: RunOptions, ended: RelaySummary, scaler: Scaler): Promise<RelaySummary> {
    const timeLeftMs = () => run.remainingMs() - this.options.safetyMarginMs;
    const canLook = ended.stoppedBecause !== 'time' && timeLeftMs() >= MIN_RUN_MS;
    // A failed look (the database out of reach) leaves what came to the next wake or tick.
    const look = canLook
      ? await this.pipeline.processBatch({ budgetMs: timeLeftMs(), fromStart: true }).catch((error) => {
          this.logger.warn('could not look for events as this relay left', { error: String(error) });
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
      recordMetrics(this.loop.metrics, { ...emptyReport(), ...look, batches: 1, stoppedBecause: 'idle' }, [
        look.durationMs,
      ]);
      this.logger.info('events came as this relay left; it took them', {
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
