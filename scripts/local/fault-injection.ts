import type { OutboxEvent } from '../../lib/outbox/types.js';
import type { Publisher, PublishOutcome } from '../../lib/publish/types.js';

/**
 * Local demo only: fails a share of events (retryably) before they reach the
 * real publisher, so a user can watch retries, backoff and dead letters.
 */
export function injectFailures(publisher: Publisher, failRate: number, random = Math.random): Publisher {
  if (failRate <= 0) return publisher;
  return {
    async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
      const failing = new Set(events.filter(() => random() < failRate).map((e) => e.id));
      const outcomes = await publisher.publish(events.filter((e) => !failing.has(e.id)));
      return [
        ...outcomes,
        ...events
          .filter((e) => failing.has(e.id))
          .map((e) => ({
            eventId: e.id,
            ok: false as const,
            retryable: true,
            environment: false,
            code: 'InjectedFailure',
            error: 'injected failure (--fail-rate)',
            delivered: e.deliveredTargets,
          })),
      ];
    },
  };
}
