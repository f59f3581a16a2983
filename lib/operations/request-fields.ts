import { ValidationError } from '../errors.js';
import {
  MAX_AGGREGATE_ID_LENGTH,
  MAX_AGGREGATE_TYPE_LENGTH,
  MAX_EVENT_TYPE_LENGTH,
  MAX_REDRIVE_LIMIT,
} from '../outbox/limits.js';
import * as z from '../zod.js';

/**
 * The zod fields operator requests share (redrive, discard, replay), and the
 * error a failed parse becomes. Internal: the requests' public types are
 * written out in redrive-input.ts and replay-input.ts.
 */

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
