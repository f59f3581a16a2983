import { z } from 'zod';
import { ValidationError } from '../errors.js';
import {
  MAX_AGGREGATE_ID_LENGTH,
  MAX_AGGREGATE_TYPE_LENGTH,
  MAX_EVENT_TYPE_LENGTH,
} from '../outbox/limits.js';

/** Most dead letters one redrive resets; larger backlogs take several calls. */
export const MAX_REDRIVE_LIMIT = 10_000;
export const DEFAULT_REDRIVE_LIMIT = 100;

/** A non-empty string of at most `max` characters. */
export const text = (max: number) =>
  z
    .string({ error: 'must be a string' })
    .min(1, 'must be a non-empty string')
    .max(max, `must be at most ${max} characters`);

export const flag = z.boolean({ error: 'must be true or false' });

// Offset required: a local time without one would mean something different
// on the operator's laptop and in Lambda (UTC).
export const instant = z.iso
  .datetime({
    offset: true,
    error: 'must be an ISO 8601 date-time with an offset, e.g. 2025-01-31T12:00:00Z',
  })
  .transform((value) => new Date(value));

/**
 * The filters every operator action on stored events shares (redrive,
 * discard, replay): ids, event type, aggregate. One definition, so their
 * limits cannot drift apart.
 */
export const eventFilterFields = {
  /** Event ids. Any 8-4-4-4-12 hex id, like the write API accepts (not only RFC 4122 versions). */
  ids: z
    .array(z.guid({ error: 'must be a UUID' }), { error: 'must be an array of UUIDs' })
    .min(1, 'must list at least one id (leave it out to filter by other fields)')
    .max(MAX_REDRIVE_LIMIT, `must list at most ${MAX_REDRIVE_LIMIT} ids`)
    .optional(),
  eventType: text(MAX_EVENT_TYPE_LENGTH).optional(),
  aggregateType: text(MAX_AGGREGATE_TYPE_LENGTH).optional(),
  aggregateId: text(MAX_AGGREGATE_ID_LENGTH).optional(),
};

/** How much, whether for real, and who asked: shared like the filters. */
export const batchFields = {
  limit: z
    .number({ error: 'must be a number' })
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(MAX_REDRIVE_LIMIT, `must be at most ${MAX_REDRIVE_LIMIT}`)
    .optional(),
  dryRun: flag.optional(),
  /** Required (true) when no filter is given: act on every matching event, up to `limit`. */
  all: flag.optional(),
  /** Who asked, for the audit log (and a replay's audit row). */
  requestedBy: text(256).optional(),
};

/**
 * The redrive request as JSON (the Lambda invoke payload, or the CLI's flags).
 * Strict: an unknown key is an error, so a misspelt filter (`eventtype`)
 * cannot silently widen a redrive to every dead letter.
 */
export const redriveInputSchema = z.strictObject({
  /**
   * `redrive` (default): back to pending, the relay publishes them again.
   * `discard`: finish them without publishing (they leave the dead letters,
   * release their aggregate in ordered mode, and stay as history with
   * `discarded_at` / `discarded_by` until retention deletes them).
   */
  action: z.enum(['redrive', 'discard'], { error: 'must be "redrive" or "discard"' }).optional(),
  ...eventFilterFields,
  /** Dead-lettered at or after this instant. */
  deadLetteredAfter: instant.optional(),
  /** Dead-lettered strictly before this instant. */
  deadLetteredBefore: instant.optional(),
  ...batchFields,
});

/** What a caller may pass to {@link parseRedriveInput} (JSON types). */
export type RedriveInput = z.input<typeof redriveInputSchema>;

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

function fieldOf(issue: z.core.$ZodIssue): string {
  if (issue.code === 'unrecognized_keys') return issue.keys[0] ?? 'input';
  if (issue.path.length === 0) return 'input';
  return issue.path
    .map((part, i) => (typeof part === 'number' ? `[${part}]` : `${i === 0 ? '' : '.'}${String(part)}`))
    .join('');
}

function messageOf(issue: z.core.$ZodIssue, what: string, keys: readonly string[]): string {
  if (issue.code === 'unrecognized_keys') {
    return `is not a ${what} option (expected ${keys.join(', ')})`;
  }
  if (issue.path.length === 0 && issue.code === 'invalid_type') return 'must be a JSON object';
  return issue.message;
}

/**
 * The {@link ValidationError} for a failed parse of an operator request: the
 * first offending field and its message, naming the other bad fields.
 */
export function requestError(error: z.ZodError, what: string, keys: readonly string[]): ValidationError {
  const [first, ...rest] = error.issues;
  const more = rest.length > 0 ? ` (and ${rest.map((i) => fieldOf(i)).join(', ')} also invalid)` : '';
  return new ValidationError(
    first ? fieldOf(first) : 'input',
    `${first ? messageOf(first, what, keys) : 'invalid'}${more}`,
    { cause: error },
  );
}

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
