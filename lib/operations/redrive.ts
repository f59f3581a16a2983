import type { Pool } from 'pg';
import { resolveSchema, withSchemaErrors } from '../db/schema.js';
import { withTransaction } from '../db/transaction.js';
import {
  countDeadLetters,
  discardDeadLetters,
  resetDeadLetters,
  selectDeadLetters,
} from '../sql/redrive-dead-letters.js';
import { aggregateKey, busyAggregates } from '../sql/replay-events.js';
import { parseRedriveInput, type RedriveInput, type RedriveRequest } from './redrive-input.js';

export { parseRedriveInput, type RedriveInput, type RedriveRequest } from './redrive-input.js';

/** What a redrive (or discard) matched and did. */
export interface RedriveResult {
  action: 'redrive' | 'discard';
  dryRun: boolean;
  /** Dead letters matching the filter, including any beyond `limit`. */
  matched: number;
  /** Rows reset to pending (redrive; always 0 on a dry run or a discard). */
  reset: number;
  /** Rows finished without being published (discard; always 0 on a dry run or a redrive). */
  discarded: number;
  /**
   * Redrive only: selected dead letters left as they are because their
   * aggregate was busy (a relay publishing one of its events, or a producer
   * writing it, right then); run again for them. Always 0 for a discard.
   */
  busy: number;
  /** Ids changed (or, on a dry run, that would be), oldest first; at most `limit`. */
  ids: string[];
}

/**
 * Moves dead letters back to pending so the relay publishes them again, or
 * (`action: 'discard'`) finishes them without publishing.
 *
 * The input is validated first ({@link parseRedriveInput}); a bad request
 * throws a `ValidationError` and touches nothing. Then, in one transaction,
 * the first `limit` matching dead letters (by seq) are locked and changed.
 * A redrive resets them: attempts 0, backoff and lease cleared,
 * `dead_lettered_at` NULL, `redrive_count` + 1, `redriven_at` now;
 * `last_error` and `delivered_targets` are kept (history; no re-send to
 * targets that already accepted the event). A discard sets `processed_at`,
 * `discarded_at` and `discarded_by` (the request's `requestedBy`) and clears
 * `dead_lettered_at`: the event is never published, leaves the dead letters,
 * and in ordered mode releases its aggregate. A dry run runs the same
 * selection in a read-only transaction without locks.
 *
 * A redrive leaves alone (and counts as `busy`) the dead letters of an
 * aggregate that a relay is publishing or a producer is writing right then:
 * the redriven event must go out before the aggregate's later events, and
 * two relays must never hold one aggregate. Run it again for them.
 *
 * @example
 * const preview = await redriveDeadLetters(pool, { eventType: 'order.created', dryRun: true });
 * // → { action: 'redrive', dryRun: true, matched: 3, reset: 0, discarded: 0, busy: 0, ids: [...] }
 * const done = await redriveDeadLetters(pool, { ids: preview.ids, requestedBy: 'alice' });
 * // → { action: 'redrive', dryRun: false, matched: 3, reset: 3, discarded: 0, busy: 0, ids: [...] }
 * await redriveDeadLetters(pool, { action: 'discard', ids: ['…'], requestedBy: 'alice' });
 * // → { action: 'discard', dryRun: false, matched: 1, reset: 0, discarded: 1, busy: 0, ids: ['…'] }
 */
export async function redriveDeadLetters(
  pool: Pool,
  input: RedriveInput,
  options: RedriveOptions = {},
): Promise<RedriveResult> {
  return redrive(pool, parseRedriveInput(input), options);
}

export interface RedriveOptions {
  /**
   * The schema of the outbox tables (`migrate({ schema })`). Default: the
   * `OUTBOX_SCHEMA` environment variable, else unqualified names (`search_path`).
   */
  schema?: string | undefined;
}

/** {@link redriveDeadLetters} for a request that is already validated. */
export async function redrive(
  pool: Pool,
  request: RedriveRequest,
  options: RedriveOptions = {},
): Promise<RedriveResult> {
  const schema = resolveSchema(options.schema);
  return withSchemaErrors(schema, () =>
    withTransaction(pool, async (client) => {
      // The database, not just this code, guarantees that a dry run writes nothing.
      if (request.dryRun) await client.query('SET TRANSACTION READ ONLY');
      const selected = await selectDeadLetters(client, request, request.limit, {
        lock: !request.dryRun,
        schema,
      });
      // Counted after the lock, so the figure agrees with what was selected.
      const matched = await countDeadLetters(client, request, schema);
      const result = {
        action: request.action,
        dryRun: request.dryRun,
        matched,
        reset: 0,
        discarded: 0,
        busy: 0,
      };
      if (request.action === 'discard') {
        const ids = selected.map((e) => e.id);
        if (request.dryRun) return { ...result, ids };
        const done = await discardDeadLetters(client, ids, request.requestedBy ?? null, schema);
        return { ...result, discarded: done.size, ids: ids.filter((id) => done.has(id)) };
      }
      // A redriven dead letter becomes its aggregate's earliest unfinished
      // event, so a redrive must not run under a relay holding that aggregate,
      // nor behind a claim about to take its old head: the same rules as a
      // replay (busyAggregates in replay-events.ts).
      const busy = await busyAggregates(client, selected, { lock: !request.dryRun, schema });
      const free = selected.filter((e) => !busy.has(aggregateKey(e))).map((e) => e.id);
      const counted = { ...result, busy: selected.length - free.length };
      if (request.dryRun) return { ...counted, ids: free };
      const reset = await resetDeadLetters(client, free, schema);
      return { ...counted, reset: reset.size, ids: free.filter((id) => reset.has(id)) };
    }),
  );
}
