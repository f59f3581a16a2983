import { createHash } from 'node:crypto';
import type { PutEventsRequestEntry } from '@aws-sdk/client-eventbridge';
import type { MessageAttributeValue, SendMessageBatchRequestEntry } from '@aws-sdk/client-sqs';
import { PublishError } from '../errors.js';
import type { OutboxEvent } from '../outbox/types.js';
import {
  parseTraceparent,
  TRACEPARENT,
  type TraceContext,
  toXrayTraceHeader,
  validXrayTraceHeader,
} from '../trace/trace-context.js';
import type { PayloadRef } from './envelope.js';
import { MAX_MESSAGE_GROUP_ID_LENGTH } from './limits.js';
import type { MessageGroupSource } from './routes.js';

/**
 * Turning one outbox row into the exact message a broker receives. Both
 * transports build their entries here, and the write API measures the same
 * bytes, so "fits" means the same thing at enqueue time and at publish time.
 *
 * A row that cannot become a message (headers that are not an object of
 * strings, a payload that is not JSON text) throws {@link MessageBuildError}:
 * a permanent failure of that event alone, never of its batch.
 */

/** The event itself cannot be turned into a message; retrying cannot help. */
export class MessageBuildError extends PublishError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { ...options, retryable: false, code: 'InvalidEvent' });
    this.name = 'MessageBuildError';
  }
}

function checkedHeaders(event: Pick<OutboxEvent, 'headers'>): Record<string, string> {
  const headers = event.headers as unknown;
  if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) {
    throw new MessageBuildError(`headers must be a JSON object of strings, got ${JSON.stringify(headers)}`);
  }
  for (const [key, value] of Object.entries(headers)) {
    if (typeof value !== 'string') {
      throw new MessageBuildError(`header "${key}" must be a string, got ${typeof value}`);
    }
  }
  return headers as Record<string, string>;
}

function occurredAt(event: Pick<OutboxEvent, 'createdAt'>): string {
  const at = event.createdAt;
  if (!(at instanceof Date) || Number.isNaN(at.getTime())) {
    throw new MessageBuildError(`created_at is not a valid time (${String(at)})`);
  }
  return at.toISOString();
}

/**
 * Calls `segment(start, end)` for each run of `text` that survives
 * compaction: everything but the white space between tokens (PostgreSQL
 * prints jsonb with a space after every `:` and `,`). String contents are
 * kept as they are. One pass over the characters.
 */
function compactSegments(text: string, segment: (start: number, end: number) => void): void {
  let start = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92)
        i++; // backslash: skip the escaped character
      else if (c === 34) inString = false;
    } else if (c === 34) {
      inString = true;
    } else if (c === 32 || c === 10 || c === 13 || c === 9) {
      if (i > start) segment(start, i);
      start = i + 1;
    }
  }
  if (start < text.length) segment(start, text.length);
}

/**
 * JSON text without the white space between tokens; dropping it changes no
 * value and keeps messages as small as `JSON.stringify` would make them
 * (about 1.5 µs for a 250-byte payload; a regular expression took 5).
 */
export function compactJson(text: string): string {
  let out = '';
  let whole = true;
  compactSegments(text, (start, end) => {
    if (start !== 0 || end !== text.length) whole = false;
    out += text.slice(start, end);
  });
  return whole ? text : out;
}

/** UTF-8 bytes of {@link compactJson}'s result, counted without building it. */
export function compactJsonBytes(text: string): number {
  let kept = 0;
  compactSegments(text, (start, end) => {
    kept += end - start;
  });
  // Removed characters are all one-byte white space.
  return Buffer.byteLength(text) - (text.length - kept);
}

/**
 * {@link compactJson} straight into a Buffer of exactly its size: for the
 * claim check, which needs the bytes (to hash and PUT), never the string.
 * A 10 MiB payload then costs one 10 MiB copy, not a compacted string and
 * its encoding on top of the claimed text.
 */
export function compactJsonBuffer(text: string): Buffer {
  const buffer = Buffer.allocUnsafe(compactJsonBytes(text));
  let offset = 0;
  compactSegments(text, (start, end) => {
    offset += buffer.write(text.slice(start, end), offset, 'utf8');
  });
  return offset === buffer.length ? buffer : buffer.subarray(0, offset);
}

const payloadSizes = new WeakMap<object, number>();

/**
 * UTF-8 bytes of the payload as the relay publishes it (compacted), counted
 * once per event and without building it. A message holds at least that
 * much, so a transport with a payload store can send an event whose payload
 * alone is over its limit straight to the claim check, without building a
 * message of several MiB only to find it too large.
 */
export function publishedPayloadBytes(event: Pick<OutboxEvent, 'payload' | 'payloadJson'>): number {
  let bytes = payloadSizes.get(event);
  if (bytes === undefined) {
    bytes =
      event.payloadJson === undefined
        ? Buffer.byteLength(JSON.stringify(event.payload) ?? '')
        : compactJsonBytes(event.payloadJson);
    payloadSizes.set(event, bytes);
  }
  return bytes;
}

/**
 * The envelope's JSON text. The payload goes in as the committed text
 * (`payload::text`, compacted), never re-serialized from a parsed value, so
 * numbers such as 12345678901234567890 or 10.10 arrive exactly as they were
 * stored.
 * Field order and names are those of {@link Envelope} (Debezium-compatible).
 */
export function envelopeJson(
  event: Pick<
    OutboxEvent,
    'id' | 'eventType' | 'aggregateType' | 'aggregateId' | 'createdAt' | 'payload' | 'payloadJson' | 'headers'
  > &
    Partial<Pick<OutboxEvent, 'replayId'>>,
  payloadRef?: PayloadRef,
): string {
  if (payloadRef) return buildEnvelope(event, payloadRef);
  // A claimed row is built once for all its targets (a queue and a bus, as
  // deployed): a claim's rows are not changed while they are published.
  let text = envelopes.get(event);
  if (text === undefined) {
    text = buildEnvelope(event, undefined);
    envelopes.set(event, text);
  }
  return text;
}

const envelopes = new WeakMap<object, string>();

function buildEnvelope(
  event: Parameters<typeof envelopeJson>[0],
  payloadRef: PayloadRef | undefined,
): string {
  const headers = checkedHeaders(event);
  let payloadField: string;
  if (payloadRef) {
    // The claim check: the payload is in S3, the message says where.
    payloadField = `"payloadRef":${JSON.stringify(payloadRef)}`;
  } else {
    const payload =
      event.payloadJson === undefined ? JSON.stringify(event.payload) : compactJson(event.payloadJson);
    if (typeof payload !== 'string' || payload.length === 0) {
      throw new MessageBuildError('payload is not JSON text');
    }
    payloadField = `"payload":${payload}`;
  }
  return (
    `{"id":${JSON.stringify(event.id)},"type":${JSON.stringify(event.eventType)}` +
    `,"aggregateType":${JSON.stringify(event.aggregateType)},"aggregateId":${JSON.stringify(event.aggregateId)}` +
    `,"occurredAt":"${occurredAt(event)}",${payloadField},"headers":${JSON.stringify(headers)}` +
    // The replay marker, only on a replay: an original message is unchanged.
    `${event.replayId ? `,"replayId":${JSON.stringify(event.replayId)}` : ''}}`
  );
}

/**
 * A MessageGroupId for `key`: SQS takes 1 to 128 characters, letters,
 * digits and ASCII punctuation (`\x21`-`\x7e`). A key that is not one is
 * replaced by `sha256:<hex of its UTF-8>` (71 characters), not truncated:
 * two long keys that share their first 128 characters must not become one
 * group, and one key always maps to the same group.
 */
export function safeGroupId(key: string): string {
  return key.length <= MAX_MESSAGE_GROUP_ID_LENGTH && /^[\x21-\x7e]+$/.test(key)
    ? key
    : `sha256:${createHash('sha256').update(key).digest('hex')}`;
}

/** A FIFO queue's MessageGroupId: the aggregate (`<type>:<id>`), so one aggregate keeps its order. */
export function messageGroupId(event: Pick<OutboxEvent, 'aggregateType' | 'aggregateId'>): string {
  return safeGroupId(`${event.aggregateType}:${event.aggregateId}`);
}

/**
 * A standard queue's MessageGroupId for an event, made safe by
 * {@link safeGroupId}; undefined when the named header is missing or empty
 * (SQS then treats the message as a tenant of its own).
 */
export function fairGroupId(
  event: Pick<OutboxEvent, 'aggregateType' | 'aggregateId' | 'headers'>,
  source: MessageGroupSource,
): string | undefined {
  if (source === 'aggregateType') return safeGroupId(event.aggregateType);
  if (source === 'aggregateId') return safeGroupId(event.aggregateId);
  const value = checkedHeaders(event)[source.header];
  return value ? safeGroupId(value) : undefined;
}

function attribute(value: string): MessageAttributeValue {
  return { DataType: 'String', StringValue: value };
}

/** SQS counts attribute names, types and values towards the message size. */
function attributesBytes(attributes: Record<string, MessageAttributeValue>): number {
  let bytes = 0;
  for (const [name, value] of Object.entries(attributes)) {
    bytes += Buffer.byteLength(name) + Buffer.byteLength(value.DataType ?? '');
    bytes += Buffer.byteLength(value.StringValue ?? '');
  }
  return bytes;
}

/** The SQS message attribute that marks a replay; its value is the replay's id. */
export const REPLAY_ID_ATTRIBUTE = 'replayId';

/**
 * FIFO `MessageDeduplicationId`: the event id, so that the relay's own
 * re-sends of one publication are deduplicated by SQS; for a replay
 * `<event id>:<replay id>`, so that a replay is not swallowed as a duplicate
 * of the original (or of an earlier replay) within SQS's five-minute window,
 * while re-sends of the same replay still are.
 */
export function deduplicationId(event: Pick<OutboxEvent, 'id' | 'replayId'>): string {
  return event.replayId ? `${event.id}:${event.replayId}` : event.id;
}

export interface SqsMessage {
  /** The batch entry without its `Id` (the transport numbers entries per call). */
  entry: Omit<SendMessageBatchRequestEntry, 'Id'>;
  /** Size as SQS counts it: body plus attribute names, types and values. */
  bytes: number;
}

/**
 * The event's trace context, from its `traceparent` header. Rows are checked
 * when written, but one written otherwise (SQL, an older producer) may hold
 * anything: an invalid value is not forwarded as trace context, and does not
 * fail the event (it still travels in the envelope's headers).
 */
function traceOf(event: Pick<OutboxEvent, 'headers'>): TraceContext | undefined {
  return parseTraceparent(checkedHeaders(event)[TRACEPARENT]);
}

/**
 * The SQS message for an event; FIFO queues also get group and deduplication
 * ids, a standard queue with a `group` source a MessageGroupId (fair queues).
 *
 * Message attributes: `eventId`, `eventType`, `aggregateType`,
 * `aggregateId`, `traceparent` when the event has trace context, and
 * `replayId` on a replay (six at most; SQS allows ten). Headers travel in
 * the body, not as attributes. An
 * event with trace context also gets the `AWSTraceHeader` system attribute
 * (X-Ray format), which SQS does not count towards the message size.
 */
export function sqsMessage(
  event: OutboxEvent,
  options: {
    fifo: boolean;
    payloadRef?: PayloadRef | undefined;
    /** A standard queue's MessageGroupId (fair queues); FIFO queues group by aggregate. */
    group?: MessageGroupSource | undefined;
  },
): SqsMessage {
  const body = envelopeJson(event, options.payloadRef);
  const attributes: Record<string, MessageAttributeValue> = {
    eventId: attribute(event.id),
    eventType: attribute(event.eventType),
    aggregateType: attribute(event.aggregateType),
    aggregateId: attribute(event.aggregateId),
  };
  const trace = traceOf(event);
  if (trace) attributes[TRACEPARENT] = attribute(trace.traceparent);
  if (event.replayId) attributes[REPLAY_ID_ATTRIBUTE] = attribute(event.replayId);
  const entry: SqsMessage['entry'] = { MessageBody: body, MessageAttributes: attributes };
  if (trace) {
    entry.MessageSystemAttributes = {
      AWSTraceHeader: { DataType: 'String', StringValue: toXrayTraceHeader(trace) },
    };
  }
  if (options.fifo) {
    entry.MessageGroupId = messageGroupId(event);
    entry.MessageDeduplicationId = deduplicationId(event);
  } else if (options.group !== undefined) {
    // Not counted in the message's size: it is neither body nor attribute.
    const group = fairGroupId(event, options.group);
    if (group !== undefined) entry.MessageGroupId = group;
  }
  return { entry, bytes: Buffer.byteLength(body) + attributesBytes(attributes) };
}

export interface EventBridgeMessage {
  entry: PutEventsRequestEntry;
  /** Size as EventBridge counts it (see {@link eventBridgeEntrySize}). */
  bytes: number;
}

/**
 * Entry size as EventBridge computes it: 14 bytes for the time field plus the
 * UTF-8 sizes of Source, DetailType, Detail and Resources.
 */
export function eventBridgeEntrySize(entry: PutEventsRequestEntry): number {
  return (
    14 +
    Buffer.byteLength(entry.Source ?? '') +
    Buffer.byteLength(entry.DetailType ?? '') +
    Buffer.byteLength(entry.Detail ?? '') +
    (entry.Resources ?? []).reduce((sum, r) => sum + Buffer.byteLength(r), 0)
  );
}

/**
 * The PutEvents entry for an event: `DetailType` = event type, `Detail` = the
 * envelope. `TraceHeader` (X-Ray format; not counted in the entry's size) is
 * the event's `traceparent` converted, else its `x-amzn-trace-id` header when
 * that is a well-formed X-Ray trace header ({@link validXrayTraceHeader}).
 */
export function eventBridgeMessage(
  event: OutboxEvent,
  options: { busName: string; source: string; payloadRef?: PayloadRef | undefined },
): EventBridgeMessage {
  const entry: PutEventsRequestEntry = {
    EventBusName: options.busName,
    Source: options.source,
    DetailType: event.eventType,
    Detail: envelopeJson(event, options.payloadRef),
  };
  const trace = traceOf(event);
  // A row's headers may hold anything (written with SQL, an older producer):
  // only a well-formed X-Ray header is passed on; another travels in the envelope alone.
  const traceHeader = trace
    ? toXrayTraceHeader(trace)
    : validXrayTraceHeader(event.headers['x-amzn-trace-id'] ?? event.headers['X-Amzn-Trace-Id']);
  if (traceHeader) entry.TraceHeader = traceHeader;
  return { entry, bytes: eventBridgeEntrySize(entry) };
}
