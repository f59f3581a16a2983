import type { OutboxEvent } from '../outbox/types.js';
import type { Publisher, PublishOutcome } from './types.js';

/**
 * Accepts everything and sends nothing. For benchmarks that measure the
 * relay's own cost, and for dry runs.
 */
export class NullPublisher implements Publisher {
  published = 0;

  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    this.published += events.length;
    return events.map((event) => ({ eventId: event.id, ok: true, delivered: [] }));
  }
}
