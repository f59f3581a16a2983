import type { OutboxLogger } from '../observer.js';
import type { PublishOutcome } from '../publish/types.js';
import { bump } from './report.js';

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
