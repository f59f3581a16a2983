import type { OutboxLogger } from '../observer.js';
import type { OutboxEvent } from '../outbox/types.js';
import type { PublishOutcome } from '../publish/types.js';
import type { Completion } from '../sql/complete-batch.js';
import { backoffDelay } from './backoff.js';
import type { ResolvedRelayOptions } from './options.js';
import { type BatchReport, bump, eventFields } from './report.js';

/** What deciding an event's fate depends on besides the event and its outcome. */
export type DecidePolicy = Pick<
  ResolvedRelayOptions,
  'maxAttempts' | 'maxPendingAgeMs' | 'backoff' | 'logAggregateId'
> & {
  ordered: boolean;
  /** Now, in ms since the epoch (the maximum pending age counts from the event's `failingSince`). */
  now: number;
  random: () => number;
};

export type Verdict =
  | { dead: string; delayMs?: never; refund?: never }
  | { dead?: never; delayMs: number; refund: boolean };

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
export function verdict(
  event: OutboxEvent,
  outcome: PublishOutcome & { ok: false },
  p: DecidePolicy,
): Verdict {
  if (!outcome.retryable) return { dead: outcome.error };
  if (outcome.environment) {
    // Counted from the first of this run of failures; none before: this is it.
    const ageMs = event.failingSince === undefined ? 0 : p.now - event.failingSince.getTime();
    if (ageMs >= p.maxPendingAgeMs) {
      return {
        dead: `failing for reasons of the environment for longer than the maximum age (${p.maxPendingAgeMs} ms); last error: ${outcome.error}`,
      };
    }
    // attempts includes this claim, which the refund gives back.
    const backoff = backoffDelay(Math.max(1, event.attempts - 1), p.backoff, p.random);
    return { delayMs: Math.max(outcome.retryAfterMs ?? 0, backoff), refund: true };
  }
  if (event.attempts >= p.maxAttempts) {
    return { dead: `attempt limit (${p.maxAttempts}) reached; last error: ${outcome.error}` };
  }
  return { delayMs: backoffDelay(event.attempts, p.backoff, p.random), refund: false };
}

/**
 * Turns a batch's publish outcomes into the completions to record, counting
 * them into `report`. Ordered mode: an event is never recorded published
 * while an earlier one of its aggregate in this batch is not (the transports
 * already hold such events back; this also covers any publisher that does
 * not). `onWaiting` hears of every event retried for its target's sake.
 */
export function decide(
  events: OutboxEvent[],
  outcomes: Map<string, PublishOutcome>,
  policy: DecidePolicy,
  report: BatchReport,
  logger: OutboxLogger,
  onWaiting: (outcome: PublishOutcome & { ok: false }) => void,
): Completion[] {
  /** Per aggregate: its first event here not delivered, and how long that one waits if it retries. */
  const stopped = new Map<string, { id: string; parkMs?: number }>();
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
    const stoppedBy = policy.ordered ? stopped.get(key) : undefined;
    if (stoppedBy !== undefined && outcome.ok) {
      outcome = {
        eventId: event.id,
        ok: false,
        retryable: true,
        environment: true,
        heldBack: true,
        code: 'HeldBack',
        error: `event ${stoppedBy.id} of the same aggregate, before it, was not delivered; recorded after that one`,
        delivered: outcome.delivered,
      };
    }
    if (policy.ordered && !outcome.ok && stoppedBy === undefined) stopped.set(key, { id: event.id });
    if (outcome.ok) {
      report.published++;
      return { id: event.id, status: 'published', delivered: outcome.delivered };
    }
    const fields = {
      ...eventFields(event, policy.logAggregateId),
      error: outcome.error,
      code: outcome.code,
    };
    if (outcome.heldBack) {
      report.heldBack++;
      if (outcome.code === 'AcceptedAfterFailure') {
        logger.error(
          'the target accepted an event after an earlier one of its aggregate failed in the same call; consumers may see them out of order',
          fields,
        );
      } else {
        logger.debug('held back behind an earlier event of its aggregate', fields);
      }
      // No attempt spent, no backoff of its own: it goes with the earlier one.
      return {
        id: event.id,
        status: 'retry',
        error: outcome.error,
        delayMs: 0,
        parkMs: stoppedBy?.parkMs,
        delivered: outcome.delivered,
        refund: true,
      };
    }
    bump(report.failedByType, event.eventType);
    const v = verdict(event, outcome, policy);
    if (v.dead !== undefined) {
      report.deadLettered++;
      bump(report.deadLetteredByType, event.eventType);
      logger.error('event dead-lettered', { ...fields, error: v.dead });
      return { id: event.id, status: 'dead', error: v.dead, delivered: outcome.delivered };
    }
    report.retried++;
    if (stopped.get(key)?.id === event.id) stopped.set(key, { id: event.id, parkMs: v.delayMs });
    if (v.refund) {
      // The environment's fault: counted into the periodic summary, not a
      // line per event (an outage would log every waiting event per claim).
      report.held++;
      onWaiting(outcome);
      logger.debug('publish failed for a reason of the environment; will retry without spending an attempt', {
        ...fields,
        retry_in_ms: v.delayMs,
      });
    } else {
      logger.warn('publish failed; will retry', { ...fields, retry_in_ms: v.delayMs });
    }
    return {
      id: event.id,
      status: 'retry',
      error: outcome.error,
      delayMs: v.delayMs,
      delivered: outcome.delivered,
      refund: v.refund,
      failing: v.refund,
      waitingFor: v.refund ? outcome.waitingFor : undefined,
    };
  });
}
