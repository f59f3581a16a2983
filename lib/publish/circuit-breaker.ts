import type { CallGate } from './types.js';

export interface CircuitBreakerOptions {
  /** Consecutive calls failing for environment reasons that open the circuit. Default 3. */
  failureThreshold?: number;
  /** First wait before probing an open target. Default 1 s. */
  probeBaseMs?: number;
  /** Longest wait between probes; each failed probe doubles the wait up to this. Default 60 s. */
  probeMaxMs?: number;
  now?: () => number;
  random?: () => number;
}

export type CircuitState = 'closed' | 'open';

export interface CircuitChange {
  state: CircuitState;
  /**
   * Open only: true when a probe failed and the circuit stays open (no
   * change of state, only a longer wait); false when it has just opened.
   */
  probeFailed?: boolean;
  /** Consecutive failed calls (closing: how many it took to recover). */
  failures: number;
  /** Wait before the next probe, when open. */
  nextProbeInMs?: number;
}

/**
 * Backs off one target as a whole when its calls keep failing for reasons of
 * the environment (network, timeouts, throttling, 5xx, access denied, missing
 * queue), instead of letting every event hammer it and spend its attempts.
 *
 * Closed: calls go through; `failureThreshold` consecutive environment
 * failures open it. Open: no calls, except one probe once the wait has
 * passed (the router makes that probe a single-entry call); the wait doubles
 * with jitter after each failed probe, up to `probeMaxMs`. A probe that
 * succeeds closes the circuit and marks the target recovered, so the relay can
 * release the events it held back. State is per relay process (one Lambda
 * container), which bounds each container to one call per probe interval.
 */
export class CircuitBreaker implements CallGate {
  private state: CircuitState = 'closed';
  private failures = 0;
  private probeWaitMs: number;
  private nextProbeAt = 0;
  private probing = false;
  private recovered = false;
  private readonly threshold: number;
  private readonly baseMs: number;
  private readonly maxMs: number;
  private readonly now: () => number;
  private readonly random: () => number;

  constructor(
    options: CircuitBreakerOptions = {},
    private readonly onChange: (change: CircuitChange) => void = () => {},
  ) {
    this.threshold = options.failureThreshold ?? 3;
    this.baseMs = options.probeBaseMs ?? 1_000;
    this.maxMs = Math.max(this.baseMs, options.probeMaxMs ?? 60_000);
    this.now = options.now ?? Date.now;
    this.random = options.random ?? Math.random;
    this.probeWaitMs = this.baseMs;
  }

  get isOpen(): boolean {
    return this.state === 'open';
  }

  /** Open, its wait over and no probe in flight: the next call is a probe. */
  get probeDue(): boolean {
    return this.state === 'open' && !this.probing && this.now() >= this.nextProbeAt;
  }

  allowCall(): boolean {
    if (this.state === 'closed') return true;
    if (!this.probeDue) return false;
    this.probing = true;
    return true;
  }

  report(failure: { environment: boolean } | undefined): void {
    const failed = failure?.environment === true;
    if (this.state === 'closed') {
      this.failures = failed ? this.failures + 1 : 0;
      if (this.failures >= this.threshold) this.open();
      return;
    }
    // Open: only the probe's result counts; calls that started before the
    // circuit opened and finish now say nothing newer.
    if (!this.probing) return;
    this.probing = false;
    if (failed) {
      this.failures++;
      this.probeWaitMs = Math.min(this.maxMs, this.probeWaitMs * 2);
      this.open(true);
    } else {
      const failures = this.failures;
      this.state = 'closed';
      this.failures = 0;
      this.probeWaitMs = this.baseMs;
      this.recovered = true;
      this.onChange({ state: 'closed', failures });
    }
  }

  /**
   * How long to hold an event of this target: until the next probe. While a
   * probe is in flight, when that is depends on how long the probe hangs,
   * so twice the longest wait a failed probe leads to (the doubled wait, at
   * most `probeMaxMs`): the event then comes due after the next probe, not
   * between the two. Nothing is lost by the long hold: a probe that
   * succeeds releases the waiting events at once (the relay's
   * `releaseWaiting`), and the next probe is carried by the events refused
   * since (held until it). Without it an outage would cost a claim and an
   * outcome per waiting event every few hundred milliseconds while a probe
   * hangs.
   */
  retryAfterMs(): number {
    if (this.state === 'closed') return 0;
    if (this.probing) return 2 * Math.min(this.maxMs, this.probeWaitMs * 2);
    return Math.max(50, this.nextProbeAt - this.now());
  }

  /** True once after each recovery. */
  takeRecovered(): boolean {
    const recovered = this.recovered;
    this.recovered = false;
    return recovered;
  }

  private open(probeFailed = false) {
    this.state = 'open';
    // Equal jitter: relays that saw the outage together do not probe together.
    const wait = Math.round(this.probeWaitMs / 2 + (this.random() * this.probeWaitMs) / 2);
    this.nextProbeAt = this.now() + wait;
    this.onChange({ state: 'open', probeFailed, failures: this.failures, nextProbeInMs: wait });
  }
}

/**
 * The publisher's `onTargetChange` as the relay functions log it: one line
 * when a target is backed off and one when it answers again; a failed probe
 * (the target stays backed off) only at debug level, since the relay's
 * periodic summary of waiting events says that it is still down and why.
 */
export function logTargetChanges(logger: {
  debug(message: string, fields: Record<string, unknown>): void;
  info(message: string, fields: Record<string, unknown>): void;
  error(message: string, fields: Record<string, unknown>): void;
}): (target: string, change: CircuitChange) => void {
  return (target, change) => {
    const fields = { target, failures: change.failures, next_probe_in_ms: change.nextProbeInMs };
    if (change.state === 'closed') logger.info('target answers again', { target, failures: change.failures });
    else if (change.probeFailed) logger.debug('probe of a backed-off target failed; waiting longer', fields);
    else
      logger.error('target unavailable: backing it off, its events wait without spending attempts', fields);
  };
}
