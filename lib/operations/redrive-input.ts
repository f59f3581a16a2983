import { ValidationError } from '../errors.js';
import { DEFAULT_REDRIVE_LIMIT, MAX_REDRIVE_LIMIT } from '../outbox/limits.js';
import * as z from '../zod.js';
import { batchFields, eventFilterFields, instant, requestError } from './request-fields.js';

/**
 * The redrive request as JSON (the Lambda invoke payload, or the CLI's flags).
 * Strict: an unknown key is an error, so a misspelt filter (`eventtype`)
 * cannot silently widen a redrive to every dead letter.
 */
const redriveInputSchema = z.strictObject({
  action: z.enum(['redrive', 'discard'], { error: 'must be "redrive" or "discard"' }).optional(),
  ...eventFilterFields,
  deadLetteredAfter: instant.optional(),
  deadLetteredBefore: instant.optional(),
  ...batchFields,
}) satisfies z.ZodType<unknown, RedriveInput>;

/**
 * The filters and batch fields redrive, discard and replay share, as a caller
 * passes them (JSON types).
 */
export interface OperatorRequestInput {
  /** Event ids (any 8-4-4-4-12 hex id), at most {@link MAX_REDRIVE_LIMIT}. */
  ids?: string[] | undefined;
  eventType?: string | undefined;
  aggregateType?: string | undefined;
  aggregateId?: string | undefined;
  /** At most {@link MAX_REDRIVE_LIMIT}; default {@link DEFAULT_REDRIVE_LIMIT}, or the number of ids. */
  limit?: number | undefined;
  /** Count what would be touched, change nothing. */
  dryRun?: boolean | undefined;
  /** Required (true) when no filter is given: act on every matching event, up to `limit`. */
  all?: boolean | undefined;
  /** Who asked, for the audit log (and a replay's audit row). */
  requestedBy?: string | undefined;
}

/** What a caller may pass to {@link parseRedriveInput} (JSON types). */
export interface RedriveInput extends OperatorRequestInput {
  /**
   * `redrive` (default): back to pending, the relay publishes them again.
   * `discard`: finish them without publishing (they leave the dead letters,
   * release their aggregate in ordered mode, and stay as history with
   * `discarded_at` / `discarded_by` until retention deletes them).
   */
  action?: 'redrive' | 'discard' | undefined;
  /** Dead-lettered at or after this instant (ISO 8601 with an offset). */
  deadLetteredAfter?: string | undefined;
  /** Dead-lettered strictly before this instant. */
  deadLetteredBefore?: string | undefined;
}

/** A validated redrive request with defaults applied. */
export interface RedriveRequest {
  action: 'redrive' | 'discard';
  ids?: string[];
  eventType?: string;
  aggregateType?: string;
  aggregateId?: string;
  deadLetteredAfter?: Date;
  deadLetteredBefore?: Date;
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
  'deadLetteredAfter',
  'deadLetteredBefore',
] as const;

/**
 * Validates a redrive request. Throws a {@link ValidationError} naming the
 * first offending field: unknown keys, malformed ids or dates, a limit over
 * {@link MAX_REDRIVE_LIMIT}, a window whose start is not before its end, or no
 * filter at all without an explicit `all: true`.
 *
 * @example
 * parseRedriveInput({ eventType: 'order.created', dryRun: true });
 * // → { eventType: 'order.created', dryRun: true, all: false, limit: 100 }
 * parseRedriveInput({});
 * // throws ValidationError('all', 'no filter given; ...')
 */
export function parseRedriveInput(input: unknown): RedriveRequest {
  const parsed = redriveInputSchema.safeParse(input ?? {});
  if (!parsed.success) {
    throw requestError(parsed.error, 'redrive', Object.keys(redriveInputSchema.shape));
  }
  const { action, limit, dryRun, all, ...rest } = parsed.data;
  const request: RedriveRequest = {
    ...(Object.fromEntries(Object.entries(rest).filter(([, v]) => v !== undefined)) as Omit<
      RedriveRequest,
      'action' | 'limit' | 'dryRun' | 'all'
    >),
    action: action ?? 'redrive',
    // A list of ids is a complete request by itself: do not cut it at the default.
    limit: limit ?? Math.max(DEFAULT_REDRIVE_LIMIT, rest.ids?.length ?? 0),
    dryRun: dryRun ?? false,
    all: all ?? false,
  };
  const { deadLetteredAfter: after, deadLetteredBefore: before } = request;
  if (after && before && after.getTime() >= before.getTime()) {
    throw new ValidationError(
      'deadLetteredAfter',
      `must be earlier than deadLetteredBefore (got ${after.toISOString()} and ${before.toISOString()})`,
    );
  }
  if (!request.all && !FILTERS.some((f) => request[f] !== undefined)) {
    throw new ValidationError(
      'all',
      `no filter given; pass at least one of ${FILTERS.join(', ')}, or all: true to ${request.action} every dead letter (up to limit)`,
    );
  }
  return request;
}
