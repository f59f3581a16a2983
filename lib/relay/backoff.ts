export interface BackoffPolicy {
  /** Delay after the first failed attempt. */
  baseMs: number;
  /** Growth per further attempt. */
  factor: number;
  /** Upper bound of any delay. */
  maxMs: number;
}

/**
 * Exponential backoff with "equal jitter": half the exponential delay is kept,
 * the other half is random. Delays still grow attempt over attempt (useful to
 * operators reading `retry_after`) while relays that failed together spread out.
 * `random` is injectable so tests are exact.
 */
export function backoffDelay(
  attempt: number,
  policy: BackoffPolicy,
  random: () => number = Math.random,
): number {
  const exponent = Math.max(0, attempt - 1);
  const ceiling = Math.min(policy.maxMs, policy.baseMs * policy.factor ** exponent);
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}
