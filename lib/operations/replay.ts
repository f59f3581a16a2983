import { randomUUID } from 'node:crypto';
import type { Pool } from 'pg';
import { resolveSchema, withSchemaErrors } from '../db/schema.js';
import { withTransaction } from '../db/transaction.js';
import {
  aggregateKey,
  busyAggregates,
  countReplayable,
  insertReplayAudit,
  resetForReplay,
  selectReplayable,
} from '../sql/replay-events.js';
import { parseReplayInput, type ReplayInput, type ReplayRequest } from './replay-input.js';

export { parseReplayInput, type ReplayInput, type ReplayRequest } from './replay-input.js';

/** What a replay matched and did. */
export interface ReplayResult {
  action: 'replay';
  dryRun: boolean;
  /** The replay's id (the marker on its messages, the audit row's key); null on a dry run. */
  replayId: string | null;
  /** Published events matching the filter, including any beyond `limit`. */
  matched: number;
  /** Events put back to pending as this replay (always 0 on a dry run). */
  replayed: number;
  /**
   * Selected events left alone because a relay was publishing an event of
   * their aggregate at that moment (their replay would race it). They still
   * match: call again.
   */
  busy: number;
  /** Ids replayed (or, on a dry run, that would be), oldest first; at most `limit`. */
  ids: string[];
}

export interface ReplayOptions {
  /**
   * Who invoked the replay as the runtime knows it, stored with the audit row
   * (`outbox_replays.caller`): the redrive function passes the Lambda caller
   * identity it logs, the CLI the OS user and host.
   */
  caller?: Record<string, unknown>;
  /**
   * The schema of the outbox tables (`migrate({ schema })`). Default: the
   * `OUTBOX_SCHEMA` environment variable, else unqualified names (`search_path`).
   */
  schema?: string | undefined;
}

/**
 * Republishes events that were already published: each matching event goes
 * back to pending with the new replay's id, and the relay publishes it again
 * with the replay marker (`replayId` in the envelope, a `replayId` message
 * attribute on SQS, a FIFO deduplication id of its own). The event keeps its
 * id, so consumers deduplicate it as before unless they opt in to replays.
 *
 * The input is validated first ({@link parseReplayInput}); a bad request
 * throws a `ValidationError` and touches nothing. Then, in one transaction:
 * the first `limit` matching published events (by seq) are locked, events of
 * aggregates a relay is publishing right now are left for the next call
 * (`busy`), the others are reset, and one row is written to `outbox_replays`
 * (who, when, filter, counts, ids). A dry run runs the same selection in a
 * read-only transaction without locks and writes no audit row.
 *
 * @example
 * const preview = await replayEvents(pool, { aggregateType: 'order', aggregateId: 'o-1', dryRun: true });
 * // → { action: 'replay', dryRun: true, replayId: null, matched: 3, replayed: 0, busy: 0, ids: [...] }
 * const done = await replayEvents(pool, { ids: preview.ids, requestedBy: 'alice' });
 * // → { action: 'replay', dryRun: false, replayId: '5f0c…', matched: 3, replayed: 3, busy: 0, ids: [...] }
 */
export async function replayEvents(
  pool: Pool,
  input: ReplayInput,
  options: ReplayOptions = {},
): Promise<ReplayResult> {
  return replay(pool, parseReplayInput(input), options);
}

/** The filter as stored in the audit row: the validated request without who asked. */
function auditFilter(request: ReplayRequest): Record<string, unknown> {
  const { requestedBy: _, action: __, dryRun: ___, ...filter } = request;
  return JSON.parse(JSON.stringify(filter));
}

/** {@link replayEvents} for a request that is already validated. */
export async function replay(
  pool: Pool,
  request: ReplayRequest,
  options: ReplayOptions = {},
): Promise<ReplayResult> {
  const schema = resolveSchema(options.schema);
  return withSchemaErrors(schema, () =>
    withTransaction(pool, async (client) => {
      // The database, not just this code, guarantees that a dry run writes nothing.
      if (request.dryRun) await client.query('SET TRANSACTION READ ONLY');
      const selected = await selectReplayable(client, request, request.limit, {
        lock: !request.dryRun,
        schema,
      });
      // Counted after the lock, so the figure agrees with what was selected.
      const matched = await countReplayable(client, request, schema);
      const busy = await busyAggregates(client, selected, { lock: !request.dryRun, schema });
      const free = selected.filter((e) => !busy.has(aggregateKey(e)));
      const result = {
        action: 'replay' as const,
        dryRun: request.dryRun,
        matched,
        busy: selected.length - free.length,
      };
      if (request.dryRun) return { ...result, replayId: null, replayed: 0, ids: free.map((e) => e.id) };
      const replayId = randomUUID();
      const reset = await resetForReplay(
        client,
        free.map((e) => e.id),
        replayId,
        schema,
      );
      const ids = free.map((e) => e.id).filter((id) => reset.has(id));
      await insertReplayAudit(
        client,
        {
          id: replayId,
          requestedBy: request.requestedBy ?? '(not given)',
          caller: options.caller ?? {},
          filter: auditFilter(request),
          matched,
          eventIds: ids,
        },
        schema,
      );
      return { ...result, replayId, replayed: ids.length, ids };
    }),
  );
}
