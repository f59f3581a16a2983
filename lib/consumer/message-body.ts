import type { Envelope } from '../publish/envelope.js';
import * as z from '../zod.js';
import { MalformedMessageError } from './errors.js';
import type { MessageSource } from './handlers.js';

/**
 * The relay's envelope ({@link Envelope}). Unknown fields are dropped rather
 * than refused so that a newer relay can add fields without breaking older
 * consumers.
 */
export const envelopeSchema = z
  .object({
    // processed_events.event_id is a uuid column. z.guid() takes any
    // 8-4-4-4-12 hex id, as PostgreSQL and the outbox's write API do; z.uuid()
    // would refuse ids whose version bits are not RFC 9562's.
    id: z.guid(),
    // varchar(128) in processed_events, and EventBridge's DetailType limit.
    type: z.string().min(1).max(128),
    aggregateType: z.string().min(1),
    aggregateId: z.string().min(1),
    occurredAt: z.iso.datetime({ offset: true }),
    // Required, unless the payload is in S3 (payloadRef): checked below.
    payload: z.unknown().optional(),
    headers: z.record(z.string(), z.string()).default({}),
    // The replay marker: present only on a replay of an already published event.
    replayId: z.guid().optional(),
    // The claim check: the payload is in S3 (docs/consumer.md, "Large payloads").
    payloadRef: z
      .object({
        s3: z.object({ bucket: z.string().min(1), key: z.string().min(1) }),
        bytes: z.int().min(0),
        sha256: z.string().regex(/^[0-9a-fA-F]{64}$/),
      })
      .optional(),
  })
  .superRefine((envelope, ctx) => {
    if (envelope.payloadRef === undefined && !Object.hasOwn(envelope, 'payload')) {
      ctx.addIssue({ code: 'custom', path: ['payload'], message: 'required (or a payloadRef)' });
    }
  });

/** An envelope read from one SQS message body. */
export interface ParsedMessage {
  envelope: Envelope;
  source: MessageSource;
}

const MAX_HINT_LENGTH = 128;

/** A short string field of `value`, for log lines about a body that failed validation. */
function hint(value: unknown, key: string): string | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const field = (value as Record<string, unknown>)[key];
  return typeof field === 'string' && field.length <= MAX_HINT_LENGTH ? field : undefined;
}

/**
 * An EventBridge rule with an SQS target delivers the whole EventBridge event
 * as the body; the relay put the envelope in `detail`.
 */
function isEventBridgeEvent(value: unknown): value is { 'detail-type': string; detail: unknown } {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as Record<string, unknown>)['detail-type'] === 'string' &&
    'detail' in value
  );
}

function parseJson(messageId: string, body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    // JSON.parse's message quotes the start of the body, so it is not kept
    // (not even as `cause`, which loggers print).
    throw new MalformedMessageError(messageId, 'body', `is not valid JSON (${body.length} characters)`);
  }
}

/**
 * Reads the relay's envelope from an SQS message body: either the envelope
 * itself (the relay sent to the queue) or an EventBridge event with the
 * envelope in `detail` (bus → rule → queue).
 *
 * Error messages never quote the body: payloads may hold personal data and
 * these messages end up in logs.
 *
 * @throws {MalformedMessageError} when the body is not JSON or holds no valid envelope.
 *
 * @example
 * const { envelope, source } = parseMessageBody(record.messageId, record.body);
 * // envelope.id is the dedupe key; source is 'sqs' or 'eventbridge'
 */
export function parseMessageBody(messageId: string, body: string): ParsedMessage {
  const json = parseJson(messageId, body);
  const eventBridge = isEventBridgeEvent(json);
  const candidate = eventBridge ? json.detail : json;
  const field = eventBridge ? 'detail' : 'envelope';
  const parsed = envelopeSchema.safeParse(candidate);
  if (!parsed.success) {
    const issues = parsed.error.issues
      .map((issue) =>
        issue.path.length ? `${issue.path.map(String).join('.')}: ${issue.message}` : issue.message,
      )
      .join('; ');
    throw new MalformedMessageError(messageId, field, `not a valid outbox envelope (${issues})`, {
      cause: parsed.error,
      eventId: hint(candidate, 'id'),
      eventType: hint(candidate, 'type') ?? (eventBridge ? json['detail-type'] : undefined),
    });
  }
  const source: MessageSource = eventBridge ? 'eventbridge' : 'sqs';
  return { envelope: parsed.data as Envelope, source };
}
