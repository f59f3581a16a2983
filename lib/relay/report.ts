import type { OutboxLogger, OutboxMetrics } from '../observer.js';
import type { PublishOutcome } from '../publish/types.js';
import type { OutboxStats } from '../sql/outbox-stats.js';

/** An event's fields for a log line: `aggregate_id` only when `logAggregateId` asks for it. */
export function eventFields(
  event: {
    id: string;
    eventType?: string | undefined;
    aggregateId?: string | undefined;
    attempts?: number | undefined;
  },
  logAggregateId: boolean,
): Record<string, unknown> {
  return {
    event_id: event.id,
    event_type: event.eventType,
    ...(logAggregateId ? { aggregate_id: event.aggregateId } : {}),
    attempt: event.attempts,
  };
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

export interface RelaySummary extends BatchReport {
  batches: number;
  /**
   * `busy`: with `maxRelays`, every relay slot was held; the run claimed
   * nothing (or it lost its slot and left). `surplus`: with `maxRelays` and
   * an idle tail, another relay (holding its slot for longer) was draining
   * too and this run's claims said it was not needed: none had come back
   * full for 5 s, or, after the run had found work, a claim found nothing
   * while no backlog waited (scale in).
   */
  stoppedBecause: 'time' | 'idle' | 'aborted' | 'busy' | 'surplus';
  /** Outbox state when the run ended. */
  stats?: OutboxStats;
  /** With `maxRelays`: the relay slot the run held. */
  slot?: number;
  /** With `maxRelays`: relay runs this one started for a backlog. */
  relaysStarted?: number;
}

/** The counts of a report that add up over batches and runs. */
const COUNTED = ['claimed', 'published', 'retried', 'held', 'heldBack', 'deadLettered', 'leaseLost'] as const;
type Counted = (typeof COUNTED)[number];

export function emptyReport(): BatchReport {
  const counts = Object.fromEntries(COUNTED.map((key) => [key, 0])) as Record<Counted, number>;
  return { ...counts, durationMs: 0, failedByType: {}, deadLetteredByType: {} };
}

/** A run that left the outbox to other relays without claiming. */
export function busySummary(): RelaySummary {
  return { ...emptyReport(), batches: 0, durationMs: 0, stoppedBecause: 'busy', relaysStarted: 0 };
}

/** Adds `from`'s counts (and its failures by type) into `into`. */
export function addCounts(into: BatchReport, from: BatchReport): void {
  for (const key of COUNTED) into[key] += from[key];
  for (const [t, n] of Object.entries(from.failedByType)) bump(into.failedByType, t, n);
  for (const [t, n] of Object.entries(from.deadLetteredByType)) bump(into.deadLetteredByType, t, n);
}

/** Two consecutive runs of one invocation as one: counts added, the second's ending. */
export function addSummaries(first: RelaySummary, second: RelaySummary): RelaySummary {
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

export function bump(counts: Record<string, number>, key: string, by = 1): void {
  counts[key] = (counts[key] ?? 0) + by;
}

/** A run's metrics, recorded once at its end. */
export function recordMetrics(m: OutboxMetrics, summary: RelaySummary, durations: number[]): void {
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

/**
 * The events retried because their target was unavailable, per target, told
 * in one line per period instead of one per event: an outage would
 * otherwise log every waiting event at every claim.
 */
export class WaitingSummary {
  private waiting = new Map<string, { events: number; codes: Record<string, number>; lastError: string }>();
  private since: number | undefined;

  constructor(
    private readonly logger: OutboxLogger,
    private readonly periodMs: number,
    private readonly now: () => number,
  ) {}

  note(outcome: PublishOutcome & { ok: false }): void {
    this.since ??= this.now();
    for (const target of outcome.waitingFor ?? ['(unknown target)']) {
      const entry = this.waiting.get(target) ?? { events: 0, codes: {}, lastError: '' };
      entry.events++;
      bump(entry.codes, outcome.code ?? 'Error');
      entry.lastError = outcome.error;
      this.waiting.set(target, entry);
    }
  }

  /** Writes the line once a period has passed since the first event noted, or now with `force` (a run's end). */
  flush(force: boolean): void {
    if (this.since === undefined) return;
    const periodMs = this.now() - this.since;
    if (!force && periodMs < this.periodMs) return;
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
    this.since = undefined;
  }
}
