import type { Publisher, PublishOutcome } from '../../lib/publish/types.js';

/**
 * `--broken-relay` only: a publisher that reports every event as published
 * without sending it, the bug the suite exists to catch. A run with it must
 * fail with lost > 0; if it passes, the suite proves nothing.
 */
export function reportWithoutSending(_publisher: Publisher): Publisher {
  return {
    async publish(events): Promise<PublishOutcome[]> {
      return events.map((event) => ({ eventId: event.id, ok: true, delivered: [...event.deliveredTargets] }));
    },
  };
}
