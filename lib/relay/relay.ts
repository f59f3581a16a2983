import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { guardPool, isConnectionLost, translateConnectionError } from '../db/connection-guard.js';
import type { Queryable } from '../db/queryable.js';
import { ConfigError } from '../errors.js';
import { noMetrics, type OutboxLogger, type OutboxMetrics, silentLogger } from '../observer.js';
import type { OutboxEvent } from '../outbox/types.js';
import type { Publisher, PublishOutcome } from '../publish/types.js';
import { type ClaimParams, type ClaimResult, claimBatch, markClaimedAlone } from '../sql/claim-batch.js';
import { type Completion, completeBatch } from '../sql/complete-batch.js';
import { type OutboxStats, outboxStats } from '../sql/outbox-stats.js';
import {
  acquireRelaySlot,
  parkRelaySlots,
  readyBacklog,
  relayIsSurplus,
  relaySlotParked,
  relaySlotState,
  releaseRelaySlot,
  renewRelaySlot,
  retryDueWithin,
} from '../sql/relay-slots.js';
import { releaseWaiting } from '../sql/release-waiting.js';
import { backoffDelay } from './backoff.js';
import { sleepSignal, type WorkSignal } from './notifier.js';
import { type RelayOptions, type ResolvedRelayOptions, resolveRelayOptions } from './options.js';

/** Unordered mode: a claim from the start of the table at least this often (claims, ms). */
const FULL_CLAIM_EVERY = 20;
const FULL_CLAIM_INTERVAL_MS = 1_000;
/** Scale out: a draining run looks at the backlog at most this often. */
const SCALE_CHECK_MS = 5_000;
/**
 * Measured scale out: the relay that scales (the lowest slot held) measures
 * its own rate over this long of full claims before it starts more relays,
 * and again once they run (PROBE_SETTLE_MS after the last took its slot).
 */
const PROBE_WINDOW_MS = 1_000;
/** ...and over this many batches at least (a slow relay's window is longer). */
const PROBE_MIN_BATCHES = 8;
const PROBE_SETTLE_MS = 500;
/** How often the scaling relay looks whether the relays it started took their slots. */
const PROBE_CHECK_MS = 250;
/** Relays started that have not taken their slots within this: no measure. */
const PROBE_JOIN_MS = 10_000;
/** A slot not renewed in this long is looked at (so a relay finds its slot closed within it). */
const RENEW_MAX_MS = 500;
/**
 * Scale in: a relay whose claims have not come back full for this long, while
 * another relay holds its slot for longer, leaves the trickle to that one.
 */
const SCALE_IN_MS = 5_000;
/**
 * ...and a relay whose claim found nothing, after it had found work, asks
 * at most this often: when a backlog runs out, the relays that drained it
 * beside the one kept leave at once instead of each spending its idle tail.
 */
const SCALE_IN_EMPTY_CHECK_MS = 1_000;
/** The least time left for a leaving run to take events that came as it left, instead of a successor. */
const MIN_RUN_MS = 5_000;
/** Longest wait for a relay slot that is about to free up. */
const SLOT_HANDOVER_WAIT_MS = 15_000;
/** ...looking for a free slot this often meanwhile. */
const SLOT_HANDOVER_POLL_MS = 250;

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

/** What one claim-publish-complete cycle did. */
export interface BatchReport {
  claimed: number;
  published: number;
  retried: number;
  /** Of the retried: failures of the environment (outage, throttling, deadline), no attempt spent. */
  held: number;
  /**
   * Ordered mode: claimed but not sent (or not counted as sent) because an
   * earlier event of the aggregate was not delivered; claimed again with it,
   * no attempt spent. Not counted in `retried`.
   */
  heldBack: number;
  deadLettered: number;
  /** Outcomes not recorded because the lease had expired and another relay took the rows. */
  leaseLost: number;
  durationMs: number;
  failedByType: Record<string, number>;
  deadLetteredByType: Record<string, number>;
}

export interface RelaySummary extends Omit<BatchReport, 'durationMs'> {
  batches: number;
  durationMs: number;
  /**
   * `busy`: with `maxRelays`, every relay slot was held; the run claimed
   * nothing. `surplus`: with `maxRelays` and an idle tail, another relay
   * (holding its slot for longer) was draining too, no backlog was waiting,
   * and either no claim had come back full for `SCALE_IN_MS` (5 s) or, after
   * the run had found work, a claim found nothing: the run left the work to
   * it (scale in).
   */
  stoppedBecause: 'time' | 'idle' | 'aborted' | 'busy' | 'surplus';
  /** Outbox state when the run ended. */
  stats?: OutboxStats;
  /** With `maxRelays`: the relay slot the run held. */
  slot?: number;
  /** With `maxRelays`: relay runs this one started for a backlog. */
  relaysStarted?: number;
}

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
   * return at once (`busy`) and leave the outbox to it. A relay that leaves
   * looks for events once its slot is free again, so an event committed
   * while a slot was held is taken by that relay or its successor. For
   * runs started by a producer's wake or by the schedule; not for runs
   * started for a backlog.
   */
  deferToRunning?: boolean;
  /**
   * Set by a run on itself when it looks once more as it leaves (with
   * `leaveIfEmpty`): if that look finds nothing, it does not look again.
   */
  lastLook?: boolean;
  abortSignal?: AbortSignal;
  /** Skip the closing outbox stats query. */
  skipStats?: boolean;
}

function emptyReport(): BatchReport {
  return {
    claimed: 0,
    published: 0,
    retried: 0,
    held: 0,
    heldBack: 0,
    deadLettered: 0,
    leaseLost: 0,
    durationMs: 0,
    failedByType: {},
    deadLetteredByType: {},
  };
}

/** A run that left the outbox to other relays without claiming. */
function busySummary(): RelaySummary {
  return { ...emptyReport(), batches: 0, durationMs: 0, stoppedBecause: 'busy', relaysStarted: 0 };
}

/** The counts of a report that add up over batches and runs. */
const COUNTED = ['claimed', 'published', 'retried', 'held', 'heldBack', 'deadLettered', 'leaseLost'] as const;

/** Adds `from`'s counts (and its failures by type) into `into`. */
function addCounts(into: BatchReport, from: BatchReport): void {
  for (const key of COUNTED) into[key] += from[key];
  for (const [t, n] of Object.entries(from.failedByType)) bump(into.failedByType, t, n);
  for (const [t, n] of Object.entries(from.deadLetteredByType)) bump(into.deadLetteredByType, t, n);
}

/** Two consecutive runs of one invocation as one: counts added, the second's ending. */
function addSummaries(first: RelaySummary, second: RelaySummary): RelaySummary {
  const sum: RelaySummary = {
    ...second,
    ...emptyReport(),
    batches: first.batches + second.batches,
    durationMs: first.durationMs + second.durationMs,
    relaysStarted: (first.relaysStarted ?? 0) + (second.relaysStarted ?? 0),
  };
  addCounts(sum, first);
  addCounts(sum, second);
  return sum;
}

function bump(counts: Record<string, number>, key: string, by = 1) {
  counts[key] = (counts[key] ?? 0) + by;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Drains the outbox: claim a batch under a lease (one short statement),
 * publish it through the {@link Publisher}, record every event's outcome in
 * one statement that only the lease holder can apply. No transaction is open
 * while the publisher talks to AWS.
 *
 * @example
 * const relay = new Relay({ db: pool, publisher: createAwsPublisher({...}) });
 * const summary = await relay.run({ remainingMs: () => context.getRemainingTimeInMillis() });
 */
export class Relay {
  readonly options: ResolvedRelayOptions;
  private readonly logger: OutboxLogger;
  private readonly metrics: OutboxMetrics;
  private readonly workSignal: WorkSignal;
  private readonly random: () => number;
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
  private backlogged = false;
  private claimsSinceFull = 0;
  private lastFullClaimAt = 0;
  private readonly now: () => number;
  /** Events retried for an unavailable target since the last summary line, per target. */
  private waiting = new Map<string, { events: number; codes: Record<string, number>; lastError: string }>();
  private waitingSince: number | undefined;
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

  constructor(private readonly deps: RelayDeps) {
    this.options = resolveRelayOptions(deps.options);
    this.logger = deps.logger ?? silentLogger;
    this.metrics = deps.metrics ?? noMetrics;
    this.workSignal = deps.workSignal ?? sleepSignal;
    this.random = deps.random ?? Math.random;
    guardPool(deps.db, this.logger); // a dropped idle connection must not crash the process
    this.now = deps.now ?? Date.now;
  }

  /**
   * One claim-publish-complete cycle. The publish has a deadline: the lease's
   * end less a guard (so the outcome is recorded by the lease holder), and
   * `budgetMs` when given (the invocation's time left less what recording
   * outcomes needs). Calls still running at the deadline are aborted, calls
   * not started are not made, and their events are retried without spending
   * an attempt.
   */
  async processBatch(budget: { budgetMs?: number } = {}): Promise<BatchReport> {
    const started = performance.now();
    const report = emptyReport();
    const leaseId = randomUUID();
    const ordered = this.options.ordering === 'aggregate';
    const full =
      ordered ||
      this.seqFloor === undefined ||
      !this.backlogged ||
      this.claimsSinceFull >= FULL_CLAIM_EVERY - 1 ||
      this.now() - this.lastFullClaimAt >= FULL_CLAIM_INTERVAL_MS;
    if (full) {
      this.claimsSinceFull = 0;
      this.lastFullClaimAt = this.now();
    } else {
      this.claimsSinceFull++;
    }
    // Waiting for the claim's turn (a suspect in flight) uses up the budget:
    // no claim when too little of it is left to publish anything.
    const budgetLeft = () => (budget.budgetMs ?? Infinity) - (performance.now() - started);
    const minimumMs = Math.min(1_000, (budget.budgetMs ?? Infinity) / 2);
    const { claim, othersInFlight, endClaim } = await this.claimInTurn(() => budgetLeft() >= minimumMs, {
      limit: this.options.batchSize,
      leaseMs: this.options.leaseMs,
      leaseId,
      maxAttempts: this.options.maxAttempts,
      ordered: this.options.ordering === 'aggregate',
      deadLetterPolicy: this.options.deadLetterPolicy,
      perAggregate: this.options.maxPerAggregate,
      maxBytes: this.options.maxClaimBytes,
      schema: this.options.schema,
      ...(full ? {} : { fromSeq: String(this.seqFloor) }),
    });
    try {
      return await this.processClaim(claim, { leaseId, othersInFlight, started, report, budgetLeft });
    } finally {
      endClaim();
    }
  }

  /**
   * Claims in this relay's turn (see {@link inFlight}). `endClaim` must be
   * called when the batch has ended, whatever happened to it.
   */
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
      if (waited && !timeLeft()) {
        return {
          claim: { events: [], exhausted: [], suspect: false },
          othersInFlight: false,
          endClaim: () => {},
        };
      }
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
    batch: {
      leaseId: string;
      othersInFlight: boolean;
      started: number;
      report: BatchReport;
      /** What is left of the caller's budget for this batch (ms). */
      budgetLeft: () => number;
    },
  ): Promise<BatchReport> {
    const { leaseId, started, report, budgetLeft } = batch;
    const claimedAt = performance.now();
    const ordered = this.options.ordering === 'aggregate';
    this.backlogged = claim.events.length + claim.exhausted.length >= this.options.batchSize;
    if (!ordered && claim.minSeq !== undefined) {
      const lowest = BigInt(claim.minSeq);
      if (this.seqFloor === undefined || lowest > this.seqFloor) this.seqFloor = lowest;
    }
    for (const dead of claim.exhausted) {
      report.deadLettered++;
      bump(report.deadLetteredByType, dead.eventType);
      this.logger.error('event dead-lettered: its lease expired without an outcome on every attempt', {
        event_id: dead.id,
        event_type: dead.eventType,
        aggregate_id: dead.aggregateId,
        attempt: dead.attempts,
      });
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
      const mine = await markClaimedAlone(this.deps.db, {
        id: suspect.id,
        leaseId,
        schema: this.options.schema,
      });
      if (!mine) {
        report.leaseLost++;
        this.logger.warn('lease ran out while the suspect waited for its turn; it is claimed again later', {
          event_id: suspect.id,
          waited_ms: Math.round(performance.now() - claimedAt),
        });
        report.durationMs = performance.now() - started;
        return report;
      }
    }

    // Outcomes must be recorded while the lease is still ours (it runs from
    // the claim), and within the caller's budget.
    const leaseGuardMs = Math.min(Math.max(1_000, this.options.leaseMs / 10), this.options.leaseMs / 4);
    const deadlineMs = Math.max(
      0,
      Math.min(this.options.leaseMs - leaseGuardMs - (performance.now() - claimedAt), budgetLeft()),
    );
    const outcomes = await this.publish(claim.events, deadlineMs);
    const completions = this.decide(claim.events, outcomes, report);
    const recorded = await this.complete(leaseId, completions);
    // Within the invocation's time, as the publish was: a long release after
    // an outage must not hold the run past its end.
    await this.releaseRecovered(performance.now() + budgetLeft());
    for (const c of completions) {
      if (!recorded.has(c.id)) {
        report.leaseLost++;
        const event = claim.events.find((e) => e.id === c.id);
        this.logger.warn('lease lost before the outcome was recorded; another relay owns the event now', {
          event_id: c.id,
          event_type: event?.eventType,
          aggregate_id: event?.aggregateId,
          attempt: event?.attempts,
          outcome: c.status,
        });
      }
    }
    report.durationMs = performance.now() - started;
    this.logger.debug('batch done', { ...report });
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
    let outcomes: PublishOutcome[];
    try {
      const result = await Promise.race([
        this.deps.publisher.publish(events, {
          signal: controller.signal,
          ordered: this.options.ordering === 'aggregate',
        }),
        deadline,
      ]);
      if (result === 'deadline') {
        this.logger.warn('publisher did not return by the deadline; the batch will be retried', {
          deadline_ms: Math.round(deadlineMs),
        });
        outcomes = events.map((e) => ({
          eventId: e.id,
          ok: false,
          retryable: true,
          environment: true,
          code: 'DeadlineExceeded',
          error: `publish deadline of ${Math.round(deadlineMs)} ms passed`,
          delivered: e.deliveredTargets,
        }));
      } else {
        outcomes = result;
      }
    } catch (error) {
      this.logger.error('publisher threw; the whole batch will be retried', { error: String(error) });
      outcomes = events.map((e) => ({
        eventId: e.id,
        ok: false,
        retryable: true,
        environment: false,
        error: `publisher threw: ${String(error)}`,
        delivered: e.deliveredTargets,
      }));
    } finally {
      clearTimeout(timer);
    }
    return new Map(outcomes.map((o) => [o.eventId, o]));
  }

  private decide(
    events: OutboxEvent[],
    outcomes: Map<string, PublishOutcome>,
    report: BatchReport,
  ): Completion[] {
    // Ordered mode: an event is never recorded published while an earlier one
    // of its aggregate in this batch is not (the transports already hold such
    // events back; this also covers any publisher that does not).
    const stopped = new Map<string, string>();
    const ordered = this.options.ordering === 'aggregate';
    return events.map((event): Completion => {
      const key = `${event.aggregateType}\u0000${event.aggregateId}`;
      let outcome: PublishOutcome = outcomes.get(event.id) ?? {
        eventId: event.id,
        ok: false,
        retryable: true,
        environment: false,
        error: 'publisher returned no outcome for this event',
        delivered: event.deliveredTargets,
      };
      const stoppedBy = ordered ? stopped.get(key) : undefined;
      if (stoppedBy !== undefined && outcome.ok) {
        outcome = {
          eventId: event.id,
          ok: false,
          retryable: true,
          environment: true,
          heldBack: true,
          code: 'HeldBack',
          error: `event ${stoppedBy} of the same aggregate, before it, was not delivered; recorded after that one`,
          delivered: outcome.delivered,
        };
      }
      if (ordered && !outcome.ok && stoppedBy === undefined) stopped.set(key, event.id);
      if (outcome.ok) {
        report.published++;
        return { id: event.id, status: 'published', delivered: outcome.delivered };
      }
      const fields = {
        event_id: event.id,
        event_type: event.eventType,
        aggregate_id: event.aggregateId,
        attempt: event.attempts,
        error: outcome.error,
        code: outcome.code,
      };
      if (outcome.heldBack) {
        report.heldBack++;
        if (outcome.code === 'AcceptedAfterFailure') {
          this.logger.error(
            'the target accepted an event after an earlier one of its aggregate failed in the same call; consumers may see them out of order',
            fields,
          );
        } else {
          this.logger.debug('held back behind an earlier event of its aggregate', fields);
        }
        // No attempt spent, no backoff: it goes as soon as the earlier one did.
        return {
          id: event.id,
          status: 'retry',
          error: outcome.error,
          delayMs: 0,
          delivered: outcome.delivered,
          refund: true,
        };
      }
      bump(report.failedByType, event.eventType);
      const verdict = this.verdict(event, outcome);
      if (verdict.dead !== undefined) {
        report.deadLettered++;
        bump(report.deadLetteredByType, event.eventType);
        this.logger.error('event dead-lettered', { ...fields, error: verdict.dead });
        return { id: event.id, status: 'dead', error: verdict.dead, delivered: outcome.delivered };
      }
      report.retried++;
      if (verdict.refund) {
        // The environment's fault: counted into the periodic summary, not a
        // line per event (an outage would log every waiting event per claim).
        report.held++;
        this.noteWaiting(outcome);
        this.logger.debug(
          'publish failed for a reason of the environment; will retry without spending an attempt',
          {
            ...fields,
            retry_in_ms: verdict.delayMs,
          },
        );
      } else {
        this.logger.warn('publish failed; will retry', { ...fields, retry_in_ms: verdict.delayMs });
      }
      return {
        id: event.id,
        status: 'retry',
        error: outcome.error,
        delayMs: verdict.delayMs,
        delivered: outcome.delivered,
        refund: verdict.refund,
        failing: verdict.refund,
        waitingFor: verdict.refund ? outcome.waitingFor : undefined,
      };
    });
  }

  /**
   * Dead letter or retry, and whether the attempt counts:
   * - the event's fault (not retryable): dead letter now;
   * - the environment's fault: retry without spending the attempt, after the
   *   target's hold or the backoff, until such failures have lasted longer
   *   than the maximum pending age since the event was last asked to go out
   *   (`failingSince`: a redrive, a replay, or a backlog that waited for a
   *   relay that was down does not count against it);
   * - otherwise: retry with backoff until the attempts are used up.
   */
  private verdict(
    event: OutboxEvent,
    outcome: PublishOutcome & { ok: false },
  ): { dead: string; delayMs?: never; refund?: never } | { dead?: never; delayMs: number; refund: boolean } {
    if (!outcome.retryable) return { dead: outcome.error };
    if (outcome.environment) {
      // Counted from the first of this run of failures; none before: this is it.
      const ageMs = event.failingSince === undefined ? 0 : this.now() - event.failingSince.getTime();
      if (ageMs >= this.options.maxPendingAgeMs) {
        return {
          dead: `failing for reasons of the environment for longer than the maximum age (${this.options.maxPendingAgeMs} ms); last error: ${outcome.error}`,
        };
      }
      // attempts includes this claim, which the refund gives back.
      const backoff = backoffDelay(Math.max(1, event.attempts - 1), this.options.backoff, this.random);
      return { delayMs: Math.max(outcome.retryAfterMs ?? 0, backoff), refund: true };
    }
    if (event.attempts >= this.options.maxAttempts) {
      return { dead: `attempt limit (${this.options.maxAttempts}) reached; last error: ${outcome.error}` };
    }
    return { delayMs: backoffDelay(event.attempts, this.options.backoff, this.random), refund: false };
  }

  private noteWaiting(outcome: PublishOutcome & { ok: false }) {
    this.waitingSince ??= this.now();
    for (const target of outcome.waitingFor ?? ['(unknown target)']) {
      const entry = this.waiting.get(target) ?? { events: 0, codes: {}, lastError: '' };
      entry.events++;
      bump(entry.codes, outcome.code ?? 'Error');
      entry.lastError = outcome.error;
      this.waiting.set(target, entry);
    }
  }

  /**
   * One line for the events retried because their target was unavailable
   * since the last such line: per target, how many retries, why. Written at
   * most every `waitingSummaryMs`, and at the end of a run (`force`).
   */
  private logWaiting(force: boolean) {
    if (this.waitingSince === undefined) return;
    const periodMs = this.now() - this.waitingSince;
    if (!force && periodMs < this.options.waitingSummaryMs) return;
    const targets = Object.fromEntries(
      [...this.waiting].map(([target, w]) => [
        target,
        { retries: w.events, codes: w.codes, last_error: w.lastError },
      ]),
    );
    this.logger.warn('events wait for unavailable targets; retried without spending attempts', {
      targets,
      period_ms: periodMs,
    });
    this.waiting = new Map();
    this.waitingSince = undefined;
  }

  /**
   * A target answered again after an outage: the events held back for it go
   * out now instead of waiting out their hold.
   */
  private async releaseRecovered(until: number) {
    for (const target of this.deps.publisher.takeRecoveredTargets?.() ?? []) {
      try {
        const released = await releaseWaiting(this.deps.db, target, this.options.schema, { until });
        this.logger.info('target answers again; released the events waiting for it', { target, released });
      } catch (error) {
        // They go out when their hold ends; only the shortcut is lost.
        this.logger.warn('could not release events waiting for a recovered target', {
          target,
          error: String(error),
        });
      }
    }
  }

  /**
   * Records outcomes, retrying a couple of times on a database error: the
   * events are already published, and an unrecorded outcome means duplicates
   * once the lease expires.
   */
  private async complete(leaseId: string, completions: Completion[]): Promise<Set<string>> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await completeBatch(
          this.deps.db,
          leaseId,
          completions,
          this.options.publishedRows,
          this.options.schema,
        );
      } catch (error) {
        if (attempt >= 3) throw error;
        this.logger.warn('recording outcomes failed; retrying', { error: String(error), try: attempt });
        await sleep(100 * attempt);
      }
    }
  }

  /**
   * Runs `workers` loops side by side until the invocation's remaining time
   * falls under the safety margin (or the outbox is empty, with
   * `stopWhenIdle`), then stops claiming, finishes the batches in hand and
   * returns a summary. Metrics are recorded once at the end.
   */
  async run(run: RunOptions): Promise<RelaySummary> {
    const maxRelays = this.options.maxRelays;
    if (maxRelays === null) return this.drain(run);
    const elastic = (run.idleTailMs ?? this.options.idleTailMs) !== null;
    if (run.deferToRunning && elastic) {
      const { running } = await relaySlotState(this.deps.db, { maxRelays, schema: this.options.schema });
      if (running > 0) {
        this.logger.info('a relay is running; this run leaves the outbox to it', { max_relays: maxRelays });
        return busySummary();
      }
    }
    const holder = randomUUID();
    this.probe = undefined;
    this.slotClosed = false;
    this.progress = [];
    this.publishedInRun = 0;
    this.lastShortClaimAt = performance.now();
    this.nextScaleCheckAt = Number.NEGATIVE_INFINITY;
    const slot = await this.takeSlot(run, holder, maxRelays);
    if (slot === undefined) {
      this.logger.info('every relay slot is held; this run leaves the outbox to them', {
        max_relays: maxRelays,
      });
      return busySummary();
    }
    this.relaysStarted = 0;
    let summary: RelaySummary;
    try {
      summary = await this.drain(run, maxRelays, { slot, holder });
    } finally {
      await releaseRelaySlot(this.deps.db, slot, holder, this.options.schema).catch((error) =>
        // It frees itself when the run's budget ends.
        this.logger.warn('could not release the relay slot', { slot, error: String(error) }),
      );
    }
    // Out of time with a backlog left: a successor in this one's slot (when
    // free: not closed meanwhile); it measures again before it starts more.
    // Only while claims still came back full: events nobody may claim yet
    // (an aggregate held behind a dead letter) are no work for more relays.
    const startedBefore = this.relaysStarted;
    if (summary.stoppedBecause === 'time' && this.backlogged)
      await this.scaleOut(maxRelays, 'the run ended with a backlog');
    const leaving =
      summary.stoppedBecause === 'idle' ||
      summary.stoppedBecause === 'surplus' ||
      summary.stoppedBecause === 'time';
    // A last look that found nothing does not look again.
    const looked = run.lastLook === true && summary.claimed === 0;
    if (
      this.relaysStarted === startedBefore &&
      elastic &&
      leaving &&
      !looked &&
      (await this.alone(maxRelays))
    ) {
      // A producer that committed while this relay still held its slot woke
      // nobody, and no relay holds a slot now: this run looks once more (a
      // claim, which in ordered mode skips blocked aggregates) and drains
      // what it finds; out of time, it starts a successor if events wait.
      const started = this.relaysStarted;
      const rest = run.remainingMs() - this.options.safetyMarginMs;
      if (summary.stoppedBecause !== 'time' && rest >= MIN_RUN_MS) {
        const more = await this.run({ ...run, deferToRunning: false, leaveIfEmpty: true, lastLook: true });
        if (more.claimed > 0) this.logger.info('events came as this relay left; it took them', { slot });
        return addSummaries({ ...summary, slot, relaysStarted: started }, more);
      }
      if (await this.readyEvents()) await this.startSuccessor(summary.stoppedBecause);
    }
    return { ...summary, slot, relaysStarted: this.relaysStarted };
  }

  /**
   * Renews this run's slot: false once another relay took it, or the relay
   * that scales closed it. A failed renewal says yes (it is tried again).
   */
  private async stillHoldsSlot(held: { slot: number; holder: string }): Promise<boolean> {
    try {
      if (
        await renewRelaySlot(this.deps.db, {
          ...held,
          aliveMs: this.options.slotAliveMs,
          schema: this.options.schema,
        })
      )
        return true;
      if (await relaySlotParked(this.deps.db, held.slot, this.options.schema).catch(() => false)) {
        this.logger.info(
          'more relays did not raise the rate: this relay’s slot is closed; it stops claiming',
          {
            slot: held.slot,
          },
        );
        this.slotClosed = true;
      }
      return false;
    } catch (error) {
      this.logger.warn('could not renew the relay slot', { slot: held.slot, error: String(error) });
      return true;
    }
  }

  /** No relay holds a slot. A failed check says no. */
  private async alone(maxRelays: number): Promise<boolean> {
    try {
      const { running } = await relaySlotState(this.deps.db, { maxRelays, schema: this.options.schema });
      return running === 0;
    } catch (error) {
      this.logger.warn('could not look at the other relays', { error: String(error) });
      return false;
    }
  }

  /** Ready events wait (in ordered mode, perhaps behind a blocked aggregate). A failed check says no. */
  private async readyEvents(): Promise<boolean> {
    try {
      const { ready } = await readyBacklog(this.deps.db, { upTo: 1, schema: this.options.schema });
      return ready > 0;
    } catch (error) {
      this.logger.warn('could not look for events left behind', { error: String(error) });
      return false;
    }
  }

  /** Starts one relay run to take over (its own invocation), if this relay can start any. */
  private async startSuccessor(why: RelaySummary['stoppedBecause']): Promise<void> {
    const start = this.deps.startRelays;
    if (!start) return;
    try {
      await start(1);
      this.relaysStarted++;
      this.logger.info('events came as this relay left; it started a successor', { why });
    } catch (error) {
      this.logger.warn('could not start a successor; the schedule will publish the events', {
        error: String(error),
      });
    }
  }

  /**
   * Whether an event's retry comes due within `ms`: a run about to leave for
   * lack of work stays for it (its backoff is short), instead of leaving it
   * to the schedule's next run. A failed check lets the run leave.
   */
  private async retryDueWithin(ms: number): Promise<boolean> {
    try {
      return await retryDueWithin(this.deps.db, ms, this.options.schema);
    } catch (error) {
      this.logger.warn('could not look for retries coming due', { error: String(error) });
      return false;
    }
  }

  /** Relay runs started by this one's backlog checks (scale-out). */
  private relaysStarted = 0;
  private nextScaleCheckAt = Number.NEGATIVE_INFINITY;
  private scaling = false;
  /** This run's slot was closed by the relay that scales (measured scale out). */
  private slotClosed = false;
  /** Measured scale out: relays started, and this relay's rate before they came. */
  private probe:
    | {
        startedAt: number;
        running: number;
        added: number;
        rateBefore: number;
        measureFrom?: number;
        /** The fleet's rate by the first measure, when it found no rise and a second one decides. */
        firstAfter?: number;
      }
    | undefined;
  /** [time, events published so far in this run], the last PROBE_WINDOW_MS * 4 of them. */
  private progress: Array<[number, number]> = [];
  private publishedInRun = 0;
  /** When a claim last came back short of a full batch (or the run started). */
  private lastShortClaimAt = 0;

  /**
   * A free slot, or undefined when all are held. When the first held slot
   * frees up soon (a run near its end: the schedule's next run of an
   * always-on relay overlaps the last one by a few seconds), waits for it.
   */
  private async takeSlot(run: RunOptions, holder: string, maxRelays: number): Promise<number | undefined> {
    let deadline: number | undefined;
    for (;;) {
      // Held for the invocation's budget: a relay that dies frees it when its invocation would have ended.
      const holdMs = Math.min(Math.max(run.remainingMs(), 1_000), 86_400_000);
      const slot = await acquireRelaySlot(this.deps.db, {
        holder,
        maxRelays,
        holdMs,
        aliveMs: this.options.slotAliveMs,
        schema: this.options.schema,
      });
      if (slot !== undefined) return slot;
      const now = performance.now();
      if (deadline === undefined) {
        const { nextFreeMs } = await relaySlotState(this.deps.db, { maxRelays, schema: this.options.schema });
        const timeLeft = run.remainingMs() - this.options.safetyMarginMs;
        if (nextFreeMs > Math.min(SLOT_HANDOVER_WAIT_MS, timeLeft / 2)) return undefined;
        deadline = now + nextFreeMs + 50;
      } else if (now >= deadline) return undefined;
      // A run releases its slot when it returns, seconds before its hold
      // (its whole budget) runs out: look again soon, not at the hold's end.
      await sleep(Math.min(SLOT_HANDOVER_POLL_MS, Math.max(0, deadline - now)));
    }
  }

  /**
   * A run out of time with a backlog (ready events up to `scaleOutBacklog`,
   * or the oldest of them `scaleOutAgeMs` old) starts a successor when a
   * slot is free (its own, released: not when the slot was closed). A
   * failed check only costs the successor; the schedule starts one.
   */
  private async scaleOut(maxRelays: number, why: string): Promise<void> {
    const start = this.deps.startRelays;
    if (!start || this.scaling) return;
    this.scaling = true;
    try {
      const backlog = await this.backlog();
      if (!backlog.calls) return;
      const { held } = await relaySlotState(this.deps.db, { maxRelays, schema: this.options.schema });
      if (maxRelays - held <= 0) return;
      await start(1);
      this.relaysStarted += 1;
      this.logger.info('backlog: started more relays', {
        why,
        started: 1,
        max_relays: maxRelays,
        ready_at_least: backlog.ready,
        oldest_ready_ms: Math.round(backlog.oldestMs),
      });
    } catch (error) {
      this.logger.warn('could not start more relays for the backlog', { error: String(error) });
    } finally {
      this.scaling = false;
    }
  }

  /** A batch's outcome, for this run's rate (measured scale out). */
  private noteProgress(report: BatchReport): void {
    const now = performance.now();
    this.publishedInRun += report.published;
    this.progress.push([now, this.publishedInRun]);
    // The last PROBE_WINDOW_MS * 4, and PROBE_MIN_BATCHES * 4 batches at least.
    const keepFrom = now - PROBE_WINDOW_MS * 4;
    let drop = 0;
    while (
      this.progress.length - drop > PROBE_MIN_BATCHES * 4 &&
      (this.progress[drop] as [number, number])[0] < keepFrom
    )
      drop++;
    if (drop > 0) this.progress.splice(0, drop);
    if (report.claimed < this.options.batchSize) this.lastShortClaimAt = now;
  }

  /**
   * The start of the last PROBE_WINDOW_MS that held PROBE_MIN_BATCHES
   * batches (longer when batches are slow), all of them full; undefined when
   * the run has not had such a window yet.
   */
  private fullWindowStart(now: number): number | undefined {
    const n = this.progress.length;
    if (n < PROBE_MIN_BATCHES + 1) return undefined;
    const byCount = (this.progress[n - 1 - PROBE_MIN_BATCHES] as [number, number])[0];
    const start = Math.min(now - PROBE_WINDOW_MS, byCount);
    const first = (this.progress[0] as [number, number])[0];
    if (start < first || this.lastShortClaimAt >= start) return undefined;
    return start;
  }

  /** Batches this run finished after `from`. */
  private batchesSince(from: number): number {
    let n = 0;
    for (let i = this.progress.length - 1; i >= 0 && (this.progress[i] as [number, number])[0] > from; i--)
      n++;
    return n;
  }

  /** Events per second this run published since `from` (counted from the last batch at or before it). */
  private rateSince(from: number): number {
    const now = performance.now();
    let base: [number, number] | undefined;
    for (const sample of this.progress) {
      if (sample[0] > from) break;
      base = sample;
    }
    base ??= this.progress[0];
    if (!base || now - base[0] <= 0) return 0;
    return ((this.publishedInRun - base[1]) / (now - base[0])) * 1_000;
  }

  /**
   * Measured scale out, checked while claims come back full. The relay in
   * the lowest slot held measures its own rate over PROBE_WINDOW_MS of full
   * claims (and PROBE_MIN_BATCHES batches at least); with a backlog (ready
   * events up to `scaleOutBacklog`, or the oldest of them `scaleOutAgeMs`
   * old) it starts as many relays as run (doubling them; no more than the
   * free slots), and measures again once they run. When the fleet's rate
   * (this relay's times the relays running) rose by at least half a relay's
   * share for each relay added, the next check may double again. When two
   * measures in a row find it did not (the relays wait on something they
   * share: the database, a target's limit, the network), it closes every
   * slot but those of the relays that ran before, for `scaleOutParkMs`: the
   * newest relays stop claiming at their next renewal, and nobody starts
   * relays for those slots meanwhile. A claim short of a full batch during a
   * measure (the backlog ran out) voids it. A failed check only costs the
   * scale-out.
   */
  private async scaleCheck(maxRelays: number, held: { slot: number; holder: string }): Promise<void> {
    const start = this.deps.startRelays;
    if (!start || this.scaling) return;
    this.scaling = true;
    const now = performance.now();
    this.nextScaleCheckAt = now + SCALE_CHECK_MS;
    try {
      if (this.probe) {
        await this.judgeProbe(maxRelays, held, now);
        return;
      }
      const windowStart = this.fullWindowStart(now);
      if (windowStart === undefined) {
        this.nextScaleCheckAt = Math.max(now + PROBE_CHECK_MS, this.lastShortClaimAt + PROBE_WINDOW_MS);
        return;
      }
      const state = await relaySlotState(this.deps.db, { maxRelays, schema: this.options.schema });
      if (state.lowest !== held.slot) return;
      const free = maxRelays - state.held;
      if (free <= 0) return;
      const backlog = await this.backlog();
      if (!backlog.calls) return;
      const rateBefore = this.rateSince(windowStart);
      // Publishing nothing (every target out): more relays would publish nothing either.
      if (!(rateBefore > 0)) return;
      const add = Math.min(free, Math.max(1, state.running));
      await start(add);
      this.relaysStarted += add;
      this.probe = { startedAt: performance.now(), running: state.running, added: add, rateBefore };
      this.nextScaleCheckAt = performance.now() + PROBE_CHECK_MS;
      this.logger.info('backlog: started more relays', {
        why: 'a backlog while draining',
        started: add,
        running: state.running,
        max_relays: maxRelays,
        ready_at_least: backlog.ready,
        oldest_ready_ms: Math.round(backlog.oldestMs),
        events_per_second: Math.round(rateBefore),
      });
    } catch (error) {
      // Some may have started: not measured, so no more for a while.
      this.probe = undefined;
      this.nextScaleCheckAt = performance.now() + PROBE_JOIN_MS;
      this.logger.warn('could not start more relays for the backlog', { error: String(error) });
    } finally {
      this.scaling = false;
    }
  }

  private async judgeProbe(
    maxRelays: number,
    held: { slot: number; holder: string },
    now: number,
  ): Promise<void> {
    const probe = this.probe;
    if (!probe) return;
    const state = await relaySlotState(this.deps.db, { maxRelays, schema: this.options.schema });
    const { running } = state;
    if (state.lowest !== held.slot) {
      // A relay started took a lower slot: it scales from now on, and measures for itself.
      this.probe = undefined;
      this.logger.info('a relay in a lower slot scales now; not measured', { slot: held.slot });
      return;
    }
    if (probe.measureFrom === undefined) {
      if (running >= probe.running + probe.added) {
        probe.measureFrom = now + PROBE_SETTLE_MS;
        this.nextScaleCheckAt = probe.measureFrom + PROBE_WINDOW_MS;
      } else if (now - probe.startedAt > PROBE_JOIN_MS) {
        this.probe = undefined;
        this.nextScaleCheckAt = now + PROBE_JOIN_MS;
        this.logger.warn('relays started for the backlog did not take their slots; not measured', {
          started: probe.added,
          running,
        });
      } else {
        this.nextScaleCheckAt = now + PROBE_CHECK_MS;
      }
      return;
    }
    const from = probe.measureFrom;
    if (now < from + PROBE_WINDOW_MS || this.batchesSince(from) < PROBE_MIN_BATCHES) {
      this.nextScaleCheckAt = Math.max(from + PROBE_WINDOW_MS, now + PROBE_CHECK_MS);
      return;
    }
    this.probe = undefined;
    if (this.lastShortClaimAt >= from - PROBE_SETTLE_MS) {
      this.logger.info('the backlog ran short while more relays joined; not measured', {
        started: probe.added,
      });
      return;
    }
    const rateAfter = this.rateSince(from);
    const fleetBefore = probe.rateBefore * probe.running;
    const fleetAfter = rateAfter * running;
    const fields = {
      running_before: probe.running,
      running,
      events_per_second_before: Math.round(fleetBefore),
      events_per_second: Math.round(fleetAfter),
      max_relays: maxRelays,
    };
    if (fleetAfter > fleetBefore && fleetAfter >= probe.rateBefore * (probe.running + probe.added / 2)) {
      // Measured: the next check may double them again.
      this.nextScaleCheckAt = now;
      this.logger.info('more relays raised the rate', fields);
      return;
    }
    if (probe.firstAfter === undefined) {
      // One window can land on a busy moment (a stall of the database or a
      // target): parking costs the drain minutes, a second window about a second.
      this.probe = { ...probe, measureFrom: now, firstAfter: fleetAfter };
      this.nextScaleCheckAt = now + PROBE_WINDOW_MS;
      this.logger.info('one measure found the rate not raised; measuring again', fields);
      return;
    }
    const closed = await parkRelaySlots(this.deps.db, {
      ...held,
      keep: probe.running,
      maxRelays,
      parkMs: this.options.scaleOutParkMs,
      schema: this.options.schema,
    });
    this.logger.info('more relays did not raise the rate: the newest leave; their slots stay closed', {
      ...fields,
      events_per_second_first_measure: Math.round(probe.firstAfter),
      closed_slots: closed,
      closed_ms: this.options.scaleOutParkMs,
    });
  }

  /**
   * The ready events (counted up to `scaleOutBacklog`) and the oldest one's
   * age; `calls`: a backlog that calls for more relays (either threshold).
   */
  private async backlog(): Promise<{ ready: number; oldestMs: number; calls: boolean }> {
    const backlog = await readyBacklog(this.deps.db, {
      upTo: this.options.scaleOutBacklog,
      schema: this.options.schema,
    });
    const calls =
      backlog.ready >= this.options.scaleOutBacklog || backlog.oldestMs >= this.options.scaleOutAgeMs;
    return { ...backlog, calls };
  }

  /**
   * Scale in: whether another relay holding its slot for longer can take
   * this run's work (and no backlog calls for both). A failed check keeps
   * the run.
   */
  private async surplus(held: { slot: number; holder: string }): Promise<boolean> {
    try {
      if (!(await relayIsSurplus(this.deps.db, { ...held, schema: this.options.schema }))) return false;
      return !(await this.backlog()).calls;
    } catch (error) {
      this.logger.warn('could not look at the other relays', { error: String(error) });
      return false;
    }
  }

  private async drain(
    run: RunOptions,
    maxRelays?: number,
    held?: { slot: number; holder: string },
  ): Promise<RelaySummary> {
    const started = performance.now();
    const total = { ...emptyReport(), batches: 0 };
    const durations: number[] = [];
    let stoppedBecause: RelaySummary['stoppedBecause'] = 'time';
    let stop = false;
    const timeLeft = () => run.remainingMs() - this.options.safetyMarginMs;
    const atStart = run.remainingMs();
    if (atStart > 0 && atStart <= this.options.safetyMarginMs) {
      // The run could claim nothing; a deadline already passed (<= 0) is only the end of a loop.
      throw new ConfigError(
        'safetyMarginMs',
        `remainingMs() is ${Math.round(atStart)} ms at the start of the run, within the safety margin of ${this.options.safetyMarginMs} ms: the run would claim nothing; lower safetyMarginMs, or outside Lambda use runRelay`,
      );
    }
    // Kept back at the end of the invocation to record outcomes.
    const reserveMs = Math.min(2_000, this.options.safetyMarginMs / 2);
    // The idle tail: when any worker last found work (or the run started).
    let lastWorkAt = performance.now();
    const tailMs = run.idleTailMs ?? this.options.idleTailMs;
    // Scale in (relays that return when idle, with slots): when a claim last
    // came back full, and when this run last asked whether it is surplus.
    const scalesIn = held !== undefined && tailMs !== null && (maxRelays ?? 1) > 1;
    let lastFullAt = performance.now();
    let lastSurplusCheckAt = Number.NEGATIVE_INFINITY;
    let checkingSurplus = false;
    // The scale check under way (measured scale out), if any.
    let scaling: Promise<void> | undefined;

    // leaveIfEmpty: one worker makes the first claim; the others start after it.
    let firstClaim: (() => void) | undefined;
    const firstClaimDone = new Promise<void>((resolve) => {
      firstClaim = resolve;
    });
    const leaveIfEmpty = run.leaveIfEmpty === true && tailMs !== null;
    if (!leaveIfEmpty) firstClaim?.();

    // The slot's heartbeat: renewed every quarter of slotAliveMs, so that a
    // relay killed mid-run stops counting as running within slotAliveMs. A
    // relay whose slot was taken meanwhile (not renewed in time: the
    // database was out of reach) stops claiming, as one that found every
    // slot held: never more than maxRelays claim at once for long.
    let renewing = false;
    const heartbeat =
      held === undefined
        ? undefined
        : setInterval(
            () => {
              // Winding down (out of time): the slot's budget ends with the run.
              if (renewing || stop || timeLeft() <= 0) return;
              renewing = true;
              void this.stillHoldsSlot(held).then((still) => {
                renewing = false;
                if (still || stop || timeLeft() <= 0) return;
                if (!this.slotClosed)
                  this.logger.warn('this relay no longer holds its slot; it stops claiming', {
                    slot: held.slot,
                  });
                stoppedBecause = 'busy';
                stop = true;
              });
            },
            // Every second at least: a relay whose slot was closed leaves soon.
            Math.max(1, Math.min(RENEW_MAX_MS, Math.floor(this.options.slotAliveMs / 4))),
          );
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

    const work = async () => {
      // A dropped connection (failover, a terminated backend, RDS Proxy
      // recycling) fails one statement; the pool opens a new connection for
      // the next. Only when it keeps happening does the invocation fail.
      let lostInARow = 0;
      const minIdleWait = Math.max(1, Math.min(this.options.idleWaitMinMs, this.options.idleWaitMs));
      let idleWait = minIdleWait;
      while (!stop) {
        if (run.abortSignal?.aborted) {
          stoppedBecause = 'aborted';
          break;
        }
        if (timeLeft() <= 0) break;
        let report: BatchReport;
        try {
          report = await this.processBatch({ budgetMs: run.remainingMs() - reserveMs });
        } catch (error) {
          firstClaim?.();
          if (isConnectionLost(error) && lostInARow < 3 && timeLeft() > 0) {
            lostInARow++;
            this.logger.warn('database connection lost; carrying on with a new one', {
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
        this.logWaiting(false);
        if (report.claimed > 0 || report.deadLettered > 0) {
          total.batches++;
          durations.push(report.durationMs);
          addCounts(total, report);
        }
        if (report.claimed > 0 || report.deadLettered > 0) lastWorkAt = performance.now();
        if (held !== undefined && maxRelays !== undefined && maxRelays > 1) {
          this.noteProgress(report);
          // Not awaited: the workers go on claiming while it starts relays
          // (an Invoke that takes seconds stalls no claim). It never rejects.
          if (
            report.claimed >= this.options.batchSize &&
            !stop &&
            !this.scaling &&
            performance.now() >= this.nextScaleCheckAt
          )
            scaling = this.scaleCheck(maxRelays, held);
        }
        if (report.claimed >= this.options.batchSize) lastFullAt = performance.now();
        const now = performance.now();
        // A claim that found nothing after this run had found work: the
        // backlog (or the burst) ran out, and one relay is enough for what
        // follows. Not before the run found work: a relay started for a
        // backlog may meet the others' claims at its first (ordered mode).
        const emptyAfterWork = report.claimed === 0 && report.deadLettered === 0 && total.batches > 0;
        if (
          scalesIn &&
          !checkingSurplus &&
          !stop &&
          ((now - lastFullAt >= SCALE_IN_MS && now - lastSurplusCheckAt >= SCALE_CHECK_MS) ||
            (emptyAfterWork && now - lastSurplusCheckAt >= SCALE_IN_EMPTY_CHECK_MS))
        ) {
          checkingSurplus = true;
          lastSurplusCheckAt = performance.now();
          try {
            if (await this.surplus(held)) {
              this.logger.info('another relay drains the trickle; this one leaves', {
                slot: held.slot,
                max_relays: maxRelays,
              });
              stoppedBecause = 'surplus';
              stop = true;
            }
          } finally {
            checkingSurplus = false;
          }
        }
        if (leaveIfEmpty && total.batches === 0 && report.claimed === 0) {
          // A retry due within the tail keeps the run (with its tail) for it.
          if (await this.retryDueWithin(tailMs ?? 0)) lastWorkAt = performance.now();
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
            if (await this.retryDueWithin(tailMs)) {
              lastWorkAt = performance.now();
            } else {
              stoppedBecause = 'idle';
              break;
            }
          }
          // Adaptive polling: short waits while work keeps arriving, doubling
          // to idleWaitMs while there is none.
          const tailLeft =
            tailMs === null ? Infinity : Math.max(1, tailMs - (performance.now() - lastWorkAt));
          const wait = Math.min(idleWait, timeLeft(), tailLeft);
          idleWait = Math.min(idleWait * 2, this.options.idleWaitMs);
          if (wait > 0) await this.workSignal.wait(wait);
        } else {
          idleWait = minIdleWait;
        }
      }
    };

    const results = await Promise.allSettled(
      Array.from({ length: this.options.workers }, (_, worker) => loop(worker)),
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
    this.logWaiting(true);
    const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    const summary: RelaySummary = {
      ...total,
      durationMs: performance.now() - started,
      stoppedBecause,
    };
    if (!run.skipStats && !failure && run.remainingMs() > reserveMs) {
      try {
        summary.stats = await outboxStats(this.deps.db, { schema: this.options.schema });
      } catch (error) {
        // The work is done and recorded; only the closing figures are missing.
        this.logger.warn('could not read the outbox stats', { error: String(error) });
      }
    }
    this.recordMetrics(summary, durations);
    if (failure) throw failure.reason;
    return summary;
  }

  private recordMetrics(summary: RelaySummary, durations: number[]) {
    const m = this.metrics;
    m.record('Published', 'Count', summary.published);
    m.record('Retried', 'Count', summary.retried);
    // Events held back because a target failed for reasons of the environment.
    m.record('TargetUnavailable', 'Count', summary.held);
    m.record('LeaseLost', 'Count', summary.leaseLost);
    const failed = Object.values(summary.failedByType).reduce((a, b) => a + b, 0);
    m.record('Failed', 'Count', failed);
    m.record('DeadLettered', 'Count', summary.deadLettered);
    for (const [eventType, n] of Object.entries(summary.failedByType)) {
      m.record('Failed', 'Count', n, { eventType });
    }
    for (const [eventType, n] of Object.entries(summary.deadLetteredByType)) {
      m.record('DeadLettered', 'Count', n, { eventType });
    }
    for (const d of durations) m.record('BatchDurationMs', 'Milliseconds', d);
    if (summary.stats) {
      m.record('Pending', 'Count', summary.stats.pending);
      m.record('OldestPendingAgeSeconds', 'Seconds', summary.stats.oldestPendingAgeSeconds);
      m.record('DeadLetters', 'Count', summary.stats.deadLetters);
      m.record('BlockedAggregates', 'Count', summary.stats.blockedAggregates);
    }
  }
}
