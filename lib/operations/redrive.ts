import type { Pool } from 'pg';
import { withTransaction } from '../db/transaction.js';
import { countDeadLetters, resetDeadLetters, selectDeadLetters } from '../sql/redrive-dead-letters.js';
import { parseRedriveInput, type RedriveRequest } from './redrive-input.js';

export { parseRedriveInput, type RedriveInput, type RedriveRequest } from './redrive-input.js';

/** What a redrive matched and did. */
export interface RedriveResult {
  dryRun: boolean;
  /** Dead letters matching the filter, including any beyond `limit`. */
  matched: number;
  /** Rows reset to pending (always 0 on a dry run). */
  reset: number;
  /** Ids reset (or, on a dry run, that would be reset), oldest first; at most `limit`. */
  ids: string[];
}

/**
 * Moves dead letters back to pending so the relay publishes them again.
 *
 * The input is validated first ({@link parseRedriveInput}); a bad request
 * throws a `ValidationError` and touches nothing. Then, in one transaction,
 * the first `limit` matching dead letters (by seq) are locked and reset:
 * attempts 0, backoff and lease cleared, `dead_lettered_at` NULL,
 * `redrive_count` + 1, `redriven_at` now. `last_error` and
 * `delivered_targets` are kept (history; no re-send to targets that already
 * accepted the event). A dry run runs the same selection in a read-only
 * transaction without locks.
 *
 * @example
 * const preview = await redriveDeadLetters(pool, { eventType: 'order.created', dryRun: true });
 * // → { dryRun: true, matched: 3, reset: 0, ids: [...] }
 * const done = await redriveDeadLetters(pool, { ids: preview.ids, requestedBy: 'alice' });
 * // → { dryRun: false, matched: 3, reset: 3, ids: [...] }
 */
export async function redriveDeadLetters(pool: Pool, input: unknown): Promise<RedriveResult> {
  return redrive(pool, parseRedriveInput(input));
}

/** {@link redriveDeadLetters} for a request that is already validated. */
export async function redrive(pool: Pool, request: RedriveRequest): Promise<RedriveResult> {
  return withTransaction(pool, async (client) => {
    // The database, not just this code, guarantees that a dry run writes nothing.
    if (request.dryRun) await client.query('SET TRANSACTION READ ONLY');
    const selected = await selectDeadLetters(client, request, request.limit, { lock: !request.dryRun });
    // Counted after the lock, so the figure agrees with what was selected.
    const matched = await countDeadLetters(client, request);
    if (request.dryRun) return { dryRun: true, matched, reset: 0, ids: selected };
    const reset = await resetDeadLetters(client, selected);
    return { dryRun: false, matched, reset: reset.size, ids: selected.filter((id) => reset.has(id)) };
  });
}
