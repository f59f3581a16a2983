import { setTimeout as sleep } from 'node:timers/promises';
import { isConnectionLost, translateConnectionError } from '../db/connection-guard.js';
import { ConfigError } from '../errors.js';
import { outboxStats } from '../sql/outbox-stats.js';
import { retryDueWithin } from '../sql/relay-slots.js';
import type { BatchPipeline } from './batch.js';
import type { RelayContext, RunOptions } from './relay.js';
import { addCounts, type BatchReport, emptyReport, type RelaySummary, recordMetrics } from './report.js';
import { scaleInTrigger } from './scale-policy.js';
import type { Scaler } from './scaler.js';

/**
 * The run loop behind Relay.run: its workers claim until a reason to stop
 * (time, the idle tail, abort, or with a slot the scale policy), then it
 * finishes the batches in hand. With a slot (`scaler`) it renews the slot
 * and feeds the scaler what its claims saw; `wokenTailMs` replaces the idle
 * tail of a woken run. Metrics are recorded once at the end.
 */
export async function drain(
  ctx: RelayContext,
  pipeline: BatchPipeline,
  run: RunOptions,
  slot?: { scaler: Scaler; wokenTailMs: number | undefined },
): Promise<RelaySummary> {
  const { options, logger } = ctx;
  const started = performance.now();
  const total = { ...emptyReport(), batches: 0 };
  const durations: number[] = [];
  let stoppedBecause: RelaySummary['stoppedBecause'] = 'time';
  let stop = false;
  const timeLeft = () => run.remainingMs() - options.safetyMarginMs;
  const atStart = run.remainingMs();
  if (atStart > 0 && atStart <= options.safetyMarginMs) {
    // The run could claim nothing; a deadline already passed (<= 0) is only the end of a loop.
    throw new ConfigError(
      'safetyMarginMs',
      `remainingMs() is ${Math.round(atStart)} ms at the start of the run, within the safety margin of ${options.safetyMarginMs} ms: the run would claim nothing; lower safetyMarginMs, or outside Lambda use runRelay`,
    );
  }
  // Kept back at the end of the invocation to record outcomes.
  const reserveMs = Math.min(2_000, options.safetyMarginMs / 2);
  // The idle tail: when any worker last found work (or the run started).
  let lastWorkAt = performance.now();
  // A woken run's tail is short (what a new start costs), but it stays for
  // a retry due within the relay's own tail, as any run does.
  const retryTailMs = run.idleTailMs ?? options.idleTailMs;
  const tailMs = slot?.wokenTailMs ?? retryTailMs;
  const scaler = slot?.scaler;
  const scalesOut = scaler !== undefined && (options.maxRelays ?? 1) > 1;
  // Scale in (relays that return when idle, with slots): when a claim last
  // came back full, and when this run last asked whether it is surplus.
  const scalesIn = scalesOut && tailMs !== null;
  let lastFullAt = performance.now();
  let lastAskedAt = Number.NEGATIVE_INFINITY;
  let asking = false;
  // The scale check under way (measured scale out), if any.
  let scaling: Promise<void> | undefined;

  // leaveIfEmpty: one worker makes the first claim; the others start after it.
  let firstClaim: (() => void) | undefined;
  const firstClaimDone = new Promise<void>((resolve) => {
    firstClaim = resolve;
  });
  const leaveIfEmpty = run.leaveIfEmpty === true && tailMs !== null;
  if (!leaveIfEmpty) firstClaim?.();

  // A retry due within `ms` keeps a run about to leave for lack of work (its
  // backoff is short), instead of leaving it to the schedule. A failed check lets it leave.
  const retryDue = (ms: number) =>
    retryDueWithin(ctx.db, ms, options.schema).catch((error) => {
      logger.warn('could not look for retries coming due', { error: String(error) });
      return false;
    });

  // The slot's heartbeat: so that a relay killed mid-run stops counting as
  // running within slotAliveMs. A relay whose slot was taken meanwhile, or
  // lapsed (the database was out of reach), or closed, stops claiming, as
  // one that found every slot held: never more than maxRelays claim at once for long.
  let renewing = false;
  const heartbeat =
    scaler &&
    setInterval(() => {
      // Winding down (out of time): the slot's budget ends with the run.
      if (renewing || stop || timeLeft() <= 0) return;
      renewing = true;
      void scaler.stillHoldsSlot().then((still) => {
        renewing = false;
        if (still || stop || timeLeft() <= 0) return;
        if (!scaler.slotClosed)
          logger.warn('this relay no longer holds its slot; it stops claiming', { slot: scaler.slot });
        stoppedBecause = 'busy';
        stop = true;
      });
    }, scaler.renewEveryMs);
  heartbeat?.unref?.();

  const loop = async (worker: number) => {
    if (worker > 0) {
      await firstClaimDone;
      return work();
    }
    try {
      await work();
    } finally {
      firstClaim?.(); // a first loop that ended before its first claim
    }
  };

  /** What the scale policy hears of each batch: starts a scale check, or leaves as surplus. */
  const observe = async (report: BatchReport) => {
    if (!scaler) return;
    const now = performance.now();
    const full = report.claimed >= options.batchSize;
    if (full) lastFullAt = now;
    if (scalesOut) {
      scaler.rates.note(now, report.published, full);
      // Not awaited: the workers go on claiming while it starts relays
      // (an Invoke that takes seconds stalls no claim). It never rejects.
      if (full && !stop && scaler.checkDue(now)) scaling = scaler.check();
    }
    if (!scalesIn || asking || stop) return;
    const emptyAfterWork = report.claimed === 0 && report.deadLettered === 0 && total.batches > 0;
    const trigger = scaleInTrigger({ now, lastFullAt, lastAskedAt, emptyAfterWork });
    if (!trigger) return;
    asking = true;
    lastAskedAt = now;
    try {
      if (await scaler.surplus(trigger)) {
        logger.info('another relay drains the trickle; this one leaves', {
          slot: scaler.slot,
          max_relays: options.maxRelays,
        });
        stoppedBecause = 'surplus';
        stop = true;
      }
    } finally {
      asking = false;
    }
  };

  const work = async () => {
    // A dropped connection (failover, a terminated backend, RDS Proxy
    // recycling) fails one statement; the pool opens a new connection for
    // the next. Only when it keeps happening does the invocation fail.
    let lostInARow = 0;
    const minIdleWait = Math.max(1, Math.min(options.idleWaitMinMs, options.idleWaitMs));
    let idleWait = minIdleWait;
    while (!stop) {
      if (run.abortSignal?.aborted) {
        stoppedBecause = 'aborted';
        break;
      }
      if (timeLeft() <= 0) break;
      let report: BatchReport;
      try {
        report = await pipeline.processBatch({ budgetMs: run.remainingMs() - reserveMs });
      } catch (error) {
        firstClaim?.();
        if (isConnectionLost(error) && lostInARow < 3 && timeLeft() > 0) {
          lostInARow++;
          logger.warn('database connection lost; carrying on with a new one', {
            error: String(error),
            try: lostInARow,
          });
          await sleep(100 * lostInARow);
          continue;
        }
        stop = true; // let the other loops finish their batch, then fail the invocation
        throw translateConnectionError(error);
      }
      lostInARow = 0;
      ctx.waiting.flush(false);
      if (report.claimed > 0 || report.deadLettered > 0) {
        total.batches++;
        durations.push(report.durationMs);
        addCounts(total, report);
        lastWorkAt = performance.now();
      }
      await observe(report);
      if (leaveIfEmpty && total.batches === 0 && report.claimed === 0) {
        // A retry due within the tail keeps the run (with its tail) for it.
        if (await retryDue(retryTailMs ?? 0)) lastWorkAt = performance.now();
        else {
          stoppedBecause = 'idle';
          stop = true;
        }
      }
      firstClaim?.();
      if (stop) break;
      if (report.claimed === 0) {
        if (run.stopWhenIdle) {
          stoppedBecause = 'idle';
          break;
        }
        // Scale to zero: nothing found by any worker for the whole tail.
        if (tailMs !== null && performance.now() - lastWorkAt >= tailMs) {
          // Not while a retry comes due within another tail: it would wait for the schedule.
          if (await retryDue(retryTailMs ?? tailMs)) {
            lastWorkAt = performance.now();
          } else {
            stoppedBecause = 'idle';
            break;
          }
        }
        // Adaptive polling: short waits while work keeps arriving, doubling
        // to idleWaitMs while there is none.
        const tailLeft = tailMs === null ? Infinity : Math.max(1, tailMs - (performance.now() - lastWorkAt));
        const wait = Math.min(idleWait, timeLeft(), tailLeft);
        idleWait = Math.min(idleWait * 2, options.idleWaitMs);
        if (wait > 0) await ctx.workSignal.wait(wait);
      } else {
        idleWait = minIdleWait;
      }
    }
  };

  const results = await Promise.allSettled(
    Array.from({ length: options.workers }, (_, worker) => loop(worker)),
  );
  // A scale check under way ends before the run (what it started is
  // counted), unless its Invoke outlasts the time left: the run ends in time.
  if (scaling) {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      scaling,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, Math.max(0, run.remainingMs() - reserveMs));
      }),
    ]);
    clearTimeout(timer);
  }
  if (heartbeat) clearInterval(heartbeat);
  ctx.waiting.flush(true);
  const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  const summary: RelaySummary = { ...total, durationMs: performance.now() - started, stoppedBecause };
  if (!run.skipStats && !failure && run.remainingMs() > reserveMs) {
    try {
      summary.stats = await outboxStats(ctx.db, { schema: options.schema });
    } catch (error) {
      // The work is done and recorded; only the closing figures are missing.
      logger.warn('could not read the outbox stats', { error: String(error) });
    }
  }
  recordMetrics(ctx.metrics, summary, durations);
  if (failure) throw failure.reason;
  return summary;
}
