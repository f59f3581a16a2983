import { ValidationError } from '../errors.js';
import { DEFAULT_REDRIVE_LIMIT } from '../outbox/limits.js';
import * as z from '../zod.js';
import type { OperatorRequestInput } from './redrive-input.js';
import { batchFields, eventFilterFields, instant, requestError } from './request-fields.js';

/**
 * The replay request as JSON (the redrive function's payload with
 * `"action": "replay"`, or the CLI's flags). Strict, like a redrive: an
 * unknown key is an error, so a misspelt filter cannot silently widen a
 * replay. Limits are the redrive's.
 */
const replayInputSchema = z.strictObject({
  action: z.literal('replay', { error: 'must be "replay"' }).optional(),
  ...eventFilterFields,
  publishedAfter: instant.optional(),
  publishedBefore: instant.optional(),
  createdAfter: instant.optional(),
  createdBefore: instant.optional(),
  ...batchFields,
}) satisfies z.ZodType<unknown, ReplayInput>;

/** What a caller may pass to {@link parseReplayInput} (JSON types). */
export interface ReplayInput extends OperatorRequestInput {
  /** `replay`; optional for the library call, required by the redrive function to choose a replay. */
  action?: 'replay' | undefined;
  /** First published at or after this instant (the original publication, not a replay's; ISO 8601 with an offset). */
  publishedAfter?: string | undefined;
  /** First published strictly before this instant. */
  publishedBefore?: string | undefined;
  /** Written (created_at) at or after this instant. */
  createdAfter?: string | undefined;
  /** Written strictly before this instant. */
  createdBefore?: string | undefined;
}

/** A validated replay request with defaults applied. */
export interface ReplayRequest {
  action: 'replay';
  ids?: string[];
  eventType?: string;
  aggregateType?: string;
  aggregateId?: string;
  publishedAfter?: Date;
  publishedBefore?: Date;
  createdAfter?: Date;
  createdBefore?: Date;
  limit: number;
  dryRun: boolean;
  all: boolean;
  requestedBy?: string;
}

const FILTERS = [
  'ids',
  'eventType',
  'aggregateType',
  'aggregateId',
  'publishedAfter',
  'publishedBefore',
  'createdAfter',
  'createdBefore',
] as const;

const WINDOWS = [
  ['publishedAfter', 'publishedBefore'],
  ['createdAfter', 'createdBefore'],
] as const;

/**
 * Validates a replay request. Throws a {@link ValidationError} naming the
 * first offending field: unknown keys, malformed ids or dates, a limit over
 * {@link MAX_REDRIVE_LIMIT}, a window whose start is not before its end, or no
 * filter at all without an explicit `all: true`.
 *
 * @example
 * parseReplayInput({ aggregateType: 'order', aggregateId: 'o-1', dryRun: true });
 * // → { action: 'replay', aggregateType: 'order', aggregateId: 'o-1', dryRun: true, all: false, limit: 100 }
 */
export function parseReplayInput(input: unknown): ReplayRequest {
  const parsed = replayInputSchema.safeParse(input ?? {});
  if (!parsed.success) throw requestError(parsed.error, 'replay', Object.keys(replayInputSchema.shape));
  const { action: _, limit, dryRun, all, ...rest } = parsed.data;
  const request: ReplayRequest = {
    ...(Object.fromEntries(Object.entries(rest).filter(([, v]) => v !== undefined)) as Omit<
      ReplayRequest,
      'action' | 'limit' | 'dryRun' | 'all'
    >),
    action: 'replay',
    // A list of ids is a complete request by itself: do not cut it at the default.
    limit: limit ?? Math.max(DEFAULT_REDRIVE_LIMIT, rest.ids?.length ?? 0),
    dryRun: dryRun ?? false,
    all: all ?? false,
  };
  for (const [from, to] of WINDOWS) {
    const after = request[from];
    const before = request[to];
    if (after && before && after.getTime() >= before.getTime()) {
      throw new ValidationError(
        from,
        `must be earlier than ${to} (got ${after.toISOString()} and ${before.toISOString()})`,
      );
    }
  }
  if (!request.all && !FILTERS.some((f) => request[f] !== undefined)) {
    throw new ValidationError(
      'all',
      `no filter given; pass at least one of ${FILTERS.join(', ')}, or all: true to replay every published event (up to limit)`,
    );
  }
  return request;
}
