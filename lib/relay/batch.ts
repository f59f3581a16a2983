import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { OutboxEvent } from '../outbox/types.js';
import type { PublishOutcome } from '../publish/types.js';
import { type ClaimParams, type ClaimResult, claimBatch, markClaimedAlone } from '../sql/claim-batch.js';
import { type Completion, completeBatch, unparkNext } from '../sql/complete-batch.js';
import { releaseWaiting } from '../sql/release-waiting.js';
import { decide } from './decide.js';
import type { RelayContext } from './relay.js';
import { type BatchReport, bump, emptyReport, eventFields } from './report.js';

/** Unordered mode: a claim from the start of the table at least this often (claims, ms). */
const FULL_CLAIM_EVERY = 20;
const FULL_CLAIM_INTERVAL_MS = 1_000;

/**
 * The batch pipeline: claim under a lease (one short statement), publish
 * through the {@link Publisher}, decide every event's fate, record the
 * outcomes in one statement that only the lease holder can apply. No
 * transaction is open while the publisher talks to AWS. Several workers of
 * one relay share a pipeline; it keeps what their claims need in common:
 * the seq floor and fault isolation.
 */
export class BatchPipeline {
  /**
   * While draining a backlog (the last claim took a full batch), unordered
   * claims start at the lowest seq the last claim took, and every 20th claim
   * (or one a second) looks from the start again for rows left below it (a
   * transaction that committed late, a retry, an expired lease). A backlog
   * then drains at full speed even while a long transaction elsewhere keeps
   * the index entries of published rows alive. Caught up, every claim looks
   * from the start, so a late commit waits for nothing.
   */
  private seqFloor: bigint | undefined;
  /** The last claim took a full batch: a backlog, where the floor pays off. */
  lastClaimFull = false;
  /**
   * How far behind the last claim that found events was: the age of the
   * oldest event it took (from its commit, or its replay), ms. What the
   * scale policy calls lag; events nobody may claim (behind a dead letter
   * or a held head) never count in it.
   */
  lastLagMs = 0;
  private claimsSinceFull = 0;
  private lastFullClaimAt = 0;
  /**
   * Fault isolation in this process. A relay that dies loses every batch it
   * has in flight, so a row claimed alone (a suspect: see claim-batch.ts)
   * proves something only if nothing else was in flight beside it. Claims
   * run one at a time (each knows what else is in flight); while a suspect
   * is in flight no other claim starts, and a suspect claimed beside other
   * batches waits for them to end before it is published.
   */
  private inFlight = 0;
  private inFlightEnded: Array<() => void> = [];
  private claimTurn: Promise<void> = Promise.resolve();
  private isolation: Promise<void> | undefined;

  /** Per-aggregate ordering (`ordering: 'aggregate'`). */
  private readonly ordered: boolean;

  constructor(private readonly deps: RelayContext) {
    this.ordered = deps.options.ordering === 'aggregate';
  }

  /**
   * One claim-publish-complete cycle. The publish has a deadline: the lease's
   * end less a guard (so the outcome is recorded by the lease holder), and
   * `budgetMs` when given (the invocation's time left less what recording
   * outcomes needs). Calls still running at the deadline are aborted, calls
   * not started are not made, and their events are retried without spending
   * an attempt. `fromStart` claims from the start of the table (no floor).
   */
  async processBatch(budget: { budgetMs?: number; fromStart?: boolean } = {}): Promise<BatchReport> {
    const started = performance.now();
    const { options, now } = this.deps;
    const full =
      this.ordered ||
      budget.fromStart === true ||
      this.seqFloor === undefined ||
      !this.lastClaimFull ||
      this.claimsSinceFull >= FULL_CLAIM_EVERY - 1 ||
      now() - this.lastFullClaimAt >= FULL_CLAIM_INTERVAL_MS;
    if (full) {
      this.claimsSinceFull = 0;
      this.lastFullClaimAt = now();
    } else {
      this.claimsSinceFull++;
    }
    // Waiting for the claim's turn (a suspect in flight) uses up the budget:
    // no claim when too little of it is left to publish anything.
    const budgetLeft = () => (budget.budgetMs ?? Infinity) - (performance.now() - started);
    const minimumMs = Math.min(1_000, (budget.budgetMs ?? Infinity) / 2);
    const leaseId = randomUUID();
    const { claim, othersInFlight, endClaim } = await this.claimInTurn(() => budgetLeft() >= minimumMs, {
      limit: options.batchSize,
      leaseMs: options.leaseMs,
      leaseId,
      maxAttempts: options.maxAttempts,
      ordered: this.ordered,
      deadLetterPolicy: options.deadLetterPolicy,
      perAggregate: options.maxPerAggregate,
      maxBytes: options.maxClaimBytes,
      schema: options.schema,
      ...(full ? {} : { fromSeq: String(this.seqFloor) }),
    });
    try {
      return await this.processClaim(claim, { leaseId, othersInFlight, started, budgetLeft });
    } finally {
      endClaim();
    }
  }

  /** Claims in this relay's turn (see {@link inFlight}). `endClaim` must be called when the batch has ended. */
  private async claimInTurn(
    timeLeft: () => boolean,
    params: ClaimParams,
  ): Promise<{ claim: ClaimResult; othersInFlight: boolean; endClaim: () => void }> {
    const previous = this.claimTurn;
    let next = () => {};
    this.claimTurn = new Promise((resolve) => {
      next = resolve;
    });
    try {
      await previous;
      let waited = false;
      while (this.isolation) {
        waited = true;
        await this.isolation;
      }
      const none: ClaimResult = { events: [], exhausted: [], suspect: false, runEnds: [] };
      if (waited && !timeLeft()) return { claim: none, othersInFlight: false, endClaim: () => {} };
      const othersInFlight = this.inFlight > 0;
      const claim = await claimBatch(this.deps.db, { ...params, othersInFlight });
      if (claim.events.length === 0) return { claim, othersInFlight, endClaim: () => {} };
      this.inFlight++;
      let endIsolation = () => {};
      if (claim.suspect) {
        this.isolation = new Promise((resolve) => {
          endIsolation = () => {
            this.isolation = undefined;
            resolve();
          };
        });
      }
      let ended = false;
      const endClaim = () => {
        if (ended) return;
        ended = true;
        this.inFlight--;
        endIsolation();
        for (const wake of this.inFlightEnded.splice(0)) wake();
      };
      return { claim, othersInFlight, endClaim };
    } finally {
      next();
    }
  }

  private async processClaim(
    claim: ClaimResult,
    batch: { leaseId: string; othersInFlight: boolean; started: number; budgetLeft: () => number },
  ): Promise<BatchReport> {
    const { leaseId, started, budgetLeft } = batch;
    const { options, logger, db } = this.deps;
    const report = emptyReport();
    const claimedAt = performance.now();
    this.lastClaimFull = claim.events.length + claim.exhausted.length >= options.batchSize;
    if (!this.ordered && claim.minSeq !== undefined) {
      const lowest = BigInt(claim.minSeq);
      if (this.seqFloor === undefined || lowest > this.seqFloor) this.seqFloor = lowest;
    }
    this.lastLagMs = lagMs(claim.events, Date.now());
    for (const dead of claim.exhausted) {
      report.deadLettered++;
      bump(report.deadLetteredByType, dead.eventType);
      logger.error(
        'event dead-lettered: its lease expired without an outcome on every attempt',
        eventFields(dead, options.logAggregateId),
      );
    }
    report.claimed = claim.events.length;
    if (claim.events.length === 0) {
      report.durationMs = performance.now() - started;
      return report;
    }

    // A suspect claimed beside other batches of this relay: published once
    // they have ended, as the only batch in flight, so that a crash while it
    // is published is its own.
    if (claim.suspect && batch.othersInFlight) {
      while (this.inFlight > 1) await new Promise<void>((wake) => this.inFlightEnded.push(wake));
      const suspect = claim.events[0] as OutboxEvent;
      if (!(await markClaimedAlone(db, { id: suspect.id, leaseId, schema: options.schema }))) {
        report.leaseLost++;
        logger.warn('lease ran out while the suspect waited for its turn; it is claimed again later', {
          event_id: suspect.id,
          waited_ms: Math.round(performance.now() - claimedAt),
        });
        report.durationMs = performance.now() - started;
        return report;
      }
    }

    // Outcomes must be recorded while the lease is still ours (it runs from
    // the claim), and within the caller's budget.
    const leaseGuardMs = Math.min(Math.max(1_000, options.leaseMs / 10), options.leaseMs / 4);
    const deadlineMs = Math.max(
      0,
      Math.min(options.leaseMs - leaseGuardMs - (performance.now() - claimedAt), budgetLeft()),
    );
    const outcomes = await this.publish(claim.events, deadlineMs);
    const completions = decide(
      claim.events,
      outcomes,
      {
        ...options,
        ordered: this.ordered,
        now: this.deps.now(),
        random: this.deps.random,
      },
      report,
      logger,
      (outcome) => this.deps.waiting.note(outcome),
    );
    const recorded = await this.complete(leaseId, completions);
    await this.unparkAfter(claim.runEnds, completions, recorded);
    // Within the invocation's time, as the publish was: a long release after
    // an outage must not hold the run past its end.
    await this.releaseRecovered(performance.now() + budgetLeft());
    for (const c of completions) {
      if (recorded.has(c.id)) continue;
      report.leaseLost++;
      const event = claim.events.find((e) => e.id === c.id);
      logger.warn('lease lost before the outcome was recorded; another relay owns the event now', {
        ...eventFields({ ...event, id: c.id }, options.logAggregateId),
        outcome: c.status,
      });
    }
    report.durationMs = performance.now() - started;
    logger.debug('batch done', { ...report });
    return report;
  }

  /**
   * Publishes under a deadline. The publisher gets the abort signal; should it
   * not return by the deadline anyway, the batch is recorded as interrupted
   * (events it may still send then are duplicates, never losses).
   */
  private async publish(events: OutboxEvent[], deadlineMs: number): Promise<Map<string, PublishOutcome>> {
    const controller = new AbortController();
    // Every API call of the batch listens on this one signal (a batch of 500
    // is 50 calls); that is by design, not a leak.
    setMaxListeners(0, controller.signal);
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'deadline'>((resolve) => {
      timer = setTimeout(() => {
        controller.abort(new Error(`publish deadline of ${Math.round(deadlineMs)} ms passed`));
        // Give the publisher a moment to report what the aborted calls did.
        setTimeout(() => resolve('deadline'), 250).unref();
      }, deadlineMs);
    });
    const failAll = (fields: Omit<PublishOutcome & { ok: false }, 'eventId' | 'delivered'>) =>
      events.map((e): PublishOutcome => ({ ...fields, eventId: e.id, delivered: e.deliveredTargets }));
    let outcomes: PublishOutcome[];
    try {
      const result = await Promise.race([
        this.deps.publisher.publish(events, {
          signal: controller.signal,
          ordered: this.ordered,
        }),
        deadline,
      ]);
      if (result === 'deadline') {
        this.deps.logger.warn('publisher did not return by the deadline; the batch will be retried', {
          deadline_ms: Math.round(deadlineMs),
        });
        outcomes = failAll({
          ok: false,
          retryable: true,
          environment: true,
          code: 'DeadlineExceeded',
          error: `publish deadline of ${Math.round(deadlineMs)} ms passed`,
        });
      } else {
        outcomes = result;
      }
    } catch (error) {
      this.deps.logger.error('publisher threw; the whole batch will be retried', { error: String(error) });
      outcomes = failAll({
        ok: false,
        retryable: true,
        environment: false,
        error: `publisher threw: ${String(error)}`,
      });
    } finally {
      clearTimeout(timer);
    }
    return new Map(outcomes.map((o) => [o.eventId, o]));
  }

  /**
   * A target answered again after an outage: the events held back for it go
   * out now instead of waiting out their hold.
   */
  private async releaseRecovered(until: number) {
    for (const target of this.deps.publisher.takeRecoveredTargets?.() ?? []) {
      try {
        const released = await releaseWaiting(this.deps.db, target, this.deps.options.schema, { until });
        this.deps.logger.info('target answers again; released the events waiting for it', {
          target,
          released,
        });
      } catch (error) {
        // They go out when their hold ends; only the shortcut is lost.
        this.deps.logger.warn('could not release events waiting for a recovered target', {
          target,
          error: String(error),
        });
      }
    }
  }

  /** Runs published with more behind: the next event is its aggregate's head now, parked or not (unparkNext). */
  private async unparkAfter(runEnds: OutboxEvent[], completions: Completion[], recorded: Set<string>) {
    if (runEnds.length === 0) return;
    const published = new Set(completions.filter((c) => c.status === 'published').map((c) => c.id));
    const ends = runEnds.filter((e) => published.has(e.id) && recorded.has(e.id));
    await unparkNext(this.deps.db, ends, this.deps.options.schema).catch((error) =>
      // Its park ends by itself: only the shortcut is lost.
      this.deps.logger.warn('could not clear the park of the next event', { error: String(error) }),
    );
  }

  /**
   * Records outcomes, retrying a couple of times on a database error: the
   * events are already published, and an unrecorded outcome means duplicates
   * once the lease expires.
   */
  private async complete(leaseId: string, completions: Completion[]): Promise<Set<string>> {
    const { db, options, logger } = this.deps;
    for (let attempt = 1; ; attempt++) {
      try {
        return await completeBatch(db, leaseId, completions, options.publishedRows, options.schema);
      } catch (error) {
        if (attempt >= 3) throw error;
        logger.warn('recording outcomes failed; retrying', { error: String(error), try: attempt });
        await sleep(100 * attempt);
      }
    }
  }
}

/** The age of the oldest of `events` (from its commit, or its replay), ms; 0 for none. */
function lagMs(events: OutboxEvent[], now: number): number {
  let oldest = Infinity;
  for (const e of events) oldest = Math.min(oldest, (e.replayedAt ?? e.createdAt).getTime());
  return oldest === Infinity ? 0 : Math.max(0, now - oldest);
}
