import { randomUUID } from 'node:crypto';
import { ValidationError } from '../errors.js';
import { eventBridgeMessage, sqsMessage } from '../publish/messages.js';
import type { TraceHeaders } from '../trace/opentelemetry.js';
import { TRACEPARENT, TRACESTATE, traceparentProblem, tracestateProblem } from '../trace/trace-context.js';
import {
  badChars,
  checkChars,
  formatPath,
  NOT_IN_JSON_STRING,
  requireText,
  serializePayload,
} from './json-text.js';
import {
  BROKER_MESSAGE_MAX_BYTES,
  LARGE_PAYLOAD_MAX_BYTES,
  MAX_AGGREGATE_ID_LENGTH,
  MAX_AGGREGATE_TYPE_LENGTH,
  MAX_EVENT_SOURCE_BYTES,
  MAX_EVENT_TYPE_LENGTH,
  MAX_HEADERS_BYTES,
} from './limits.js';
import type { NewOutboxEvent, OutboxEvent } from './types.js';

export interface ValidateOptions {
  /**
   * Largest message a target accepts, in bytes: the SQS message (body and
   * attributes) and the EventBridge entry (Source, DetailType, Detail) the
   * relay will build for the event must both fit. Default 1 MiB, what SQS
   * and EventBridge accept (lower it for a target configured lower).
   */
  maxMessageBytes?: number;
  /**
   * The EventBridge `Source` the relay publishes with. Unset, the size check
   * assumes the longest Source the relay's config accepts (768 bytes).
   */
  eventBridgeSource?: string;
  /**
   * A limit on the payload alone (its JSON as stored, bytes). Without
   * `largePayloads` an optional, tighter limit than the message's; with it
   * the payload's only limit, default 10 MiB.
   */
  maxPayloadBytes?: number;
  /**
   * The relay stores payloads too large for a target's message in S3 and
   * sends a pointer instead (the claim check; the relay's
   * `OUTBOX_LARGE_PAYLOAD_BUCKET`, docs/consumer.md "Large payloads"). The
   * message-size check is then skipped and payloads are accepted up to
   * `maxPayloadBytes` (default 10 MiB). Turn it on only when the relay has a
   * bucket: without one, such events end in dead letters.
   */
  largePayloads?: boolean;
}

/** An event checked and serialized, ready for the INSERT. */
export interface ValidEvent {
  id: string;
  aggregateType: string;
  aggregateId: string;
  eventType: string;
  payloadJson: string;
  headersJson: string;
  /** Sizes of the messages the relay will send for it (EventBridge: with the assumed Source). */
  messageBytes: { sqs: number; eventBridge: number };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function checkHeaders(
  field: string,
  input: unknown,
  traceHeaders: (headers: Readonly<Record<string, string>>) => Record<string, string>,
): { value: Record<string, string>; json: string } {
  const headers = input ?? {};
  const proto = typeof headers === 'object' ? Object.getPrototypeOf(headers) : undefined;
  if (proto !== Object.prototype && proto !== null) {
    const got = Array.isArray(headers)
      ? 'an array'
      : typeof headers === 'object'
        ? `a ${(headers as object).constructor?.name ?? 'non-plain'} object`
        : typeof headers;
    throw new ValidationError(field, `must be a plain object of string values, got ${got}`);
  }
  const record = headers as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    const value = record[key];
    const path = formatPath(field, [key]);
    if (typeof value !== 'string') throw new ValidationError(path, 'must be a string');
    const problem = badChars(key, NOT_IN_JSON_STRING);
    if (problem) throw new ValidationError(path, `has a name that ${problem}`);
    checkChars(path, value, NOT_IN_JSON_STRING);
  }
  const added = traceHeaders(record as Record<string, string>);
  // A copy when trace headers are added: the caller's object is not changed.
  const value = Object.keys(added).length === 0 ? record : { ...record, ...added };
  const json = JSON.stringify(value);
  if (Buffer.byteLength(json, 'utf8') > MAX_HEADERS_BYTES) {
    throw new ValidationError(field, `must be at most ${MAX_HEADERS_BYTES} bytes serialized`);
  }
  return { value: value as Record<string, string>, json };
}

/**
 * The trace headers to add to an event's headers: none when `headers`
 * already hold a `traceparent` (checked here), the event's `trace` option
 * when given, else the `ambient` context (the active OpenTelemetry span's,
 * found by the caller). A `tracestate` needs a `traceparent` beside it.
 */
function traceHeaders(
  path: string,
  trace: unknown,
  headers: Readonly<Record<string, string>>,
  ambient: TraceHeaders | undefined,
): Record<string, string> {
  const headerPath = (name: string) => formatPath(`${path}.headers`, [name]);
  const check = (field: string, value: unknown, problem: (v: unknown) => string | undefined) => {
    const found = problem(value);
    if (found) throw new ValidationError(field, found);
  };
  const inHeaders = Object.hasOwn(headers, TRACEPARENT);
  if (inHeaders) check(headerPath(TRACEPARENT), headers[TRACEPARENT], traceparentProblem);
  if (Object.hasOwn(headers, TRACESTATE)) {
    if (!inHeaders) throw new ValidationError(headerPath(TRACESTATE), 'needs a traceparent header beside it');
    check(headerPath(TRACESTATE), headers[TRACESTATE], tracestateProblem);
  }
  if (trace !== undefined) {
    if (trace === null || typeof trace !== 'object' || Array.isArray(trace)) {
      throw new ValidationError(`${path}.trace`, 'must be an object { traceparent, tracestate? }');
    }
    const { traceparent, tracestate, ...rest } = trace as Record<string, unknown>;
    const unknown = Object.keys(rest)[0];
    if (unknown !== undefined) {
      throw new ValidationError(
        `${path}.trace.${unknown}`,
        'is not a trace option (traceparent, tracestate)',
      );
    }
    check(`${path}.trace.traceparent`, traceparent, traceparentProblem);
    if (tracestate !== undefined) check(`${path}.trace.tracestate`, tracestate, tracestateProblem);
    if (inHeaders) {
      if (headers[TRACEPARENT] !== traceparent || headers[TRACESTATE] !== tracestate) {
        throw new ValidationError(
          `${path}.trace`,
          'differs from the traceparent/tracestate given in headers',
        );
      }
      return {};
    }
    return tracestate === undefined
      ? { [TRACEPARENT]: traceparent as string }
      : { [TRACEPARENT]: traceparent as string, [TRACESTATE]: tracestate as string };
  }
  if (inHeaders || !ambient) return {};
  return ambient.tracestate === undefined
    ? { [TRACEPARENT]: ambient.traceparent }
    : { [TRACEPARENT]: ambient.traceparent, [TRACESTATE]: ambient.tracestate };
}

// Any instant prints as 24 characters (toISOString, years 0000-9999): the
// time the row will get does not change the message's size.
const SIZING_TIME = new Date(0);
const LONGEST_SOURCE = 'x'.repeat(MAX_EVENT_SOURCE_BYTES);

/**
 * Sizes the messages the transports will build for this event, with the same
 * builders they use. The relay publishes the payload as PostgreSQL stores it
 * (`payload::text`, compacted); where that differs from JSON.stringify's text
 * (small numbers in plain digits) the payload walk counts it, added here.
 */
function messageBytes(
  event: Omit<OutboxEvent, 'seq' | 'payload' | 'createdAt' | 'attempts' | 'deliveredTargets'>,
  extraStoredBytes: number,
  source: string,
): ValidEvent['messageBytes'] {
  const row: OutboxEvent = {
    id: event.id,
    seq: '0',
    aggregateType: event.aggregateType,
    aggregateId: event.aggregateId,
    eventType: event.eventType,
    payload: undefined,
    payloadJson: event.payloadJson,
    headers: event.headers,
    createdAt: SIZING_TIME,
    attempts: 1,
    deliveredTargets: [],
  };
  return {
    sqs: sqsMessage(row, { fifo: false }).bytes + extraStoredBytes,
    eventBridge: eventBridgeMessage(row, { busName: 'sizing', source }).bytes + extraStoredBytes,
  };
}

function checkMessageSize(field: string, bytes: ValidEvent['messageBytes'], options: ValidateOptions): void {
  const max = options.maxMessageBytes ?? BROKER_MESSAGE_MAX_BYTES;
  const [what, size] =
    bytes.eventBridge >= bytes.sqs
      ? [
          options.eventBridgeSource === undefined
            ? `an EventBridge entry (counting the longest Source, ${MAX_EVENT_SOURCE_BYTES} bytes)`
            : 'an EventBridge entry',
          bytes.eventBridge,
        ]
      : ['an SQS message (body and attributes)', bytes.sqs];
  if (size > max) {
    throw new ValidationError(
      field,
      `makes the event ${size} bytes as ${what}, ${size - max} byte${size - max === 1 ? '' : 's'} over the ${max}-byte message limit`,
    );
  }
}

/**
 * Checks one event against the column and broker limits and serializes it.
 * Throws {@link ValidationError} naming the field; touches no database.
 * `ambientTrace` (the active OpenTelemetry span's context, see enqueue.ts)
 * is stored when the event brings no trace context of its own.
 */
export function validateEvent(
  event: NewOutboxEvent,
  options: ValidateOptions = {},
  path = 'event',
  ambientTrace?: TraceHeaders,
): ValidEvent {
  if (event === null || typeof event !== 'object') {
    throw new ValidationError(path, 'must be an object');
  }
  const aggregateType = requireText(`${path}.aggregateType`, event.aggregateType, MAX_AGGREGATE_TYPE_LENGTH);
  const aggregateId = requireText(`${path}.aggregateId`, event.aggregateId, MAX_AGGREGATE_ID_LENGTH);
  const eventType = requireText(`${path}.eventType`, event.eventType, MAX_EVENT_TYPE_LENGTH);

  let id: string;
  if (event.id === undefined) {
    id = randomUUID();
  } else if (typeof event.id === 'string' && UUID.test(event.id)) {
    id = event.id.toLowerCase();
  } else {
    throw new ValidationError(`${path}.id`, 'must be a UUID');
  }

  const payload = serializePayload(`${path}.payload`, event.payload);
  const maxPayload = options.maxPayloadBytes ?? (options.largePayloads ? LARGE_PAYLOAD_MAX_BYTES : undefined);
  if (maxPayload !== undefined && payload.storedBytes > maxPayload) {
    throw new ValidationError(
      `${path}.payload`,
      `is ${payload.storedBytes} bytes serialized, over the limit of ${maxPayload} bytes` +
        (options.largePayloads ? ' (maxPayloadBytes)' : ''),
    );
  }
  const headers = checkHeaders(`${path}.headers`, event.headers, (given) =>
    traceHeaders(path, event.trace, given, ambientTrace),
  );

  const bytes = messageBytes(
    { id, aggregateType, aggregateId, eventType, payloadJson: payload.json, headers: headers.value },
    payload.extraStoredBytes,
    options.eventBridgeSource ?? LONGEST_SOURCE,
  );
  // With large payloads, a message too large carries a pointer instead of
  // the payload; what remains (ids, type, headers) always fits.
  if (!options.largePayloads) checkMessageSize(`${path}.payload`, bytes, options);

  return {
    id,
    aggregateType,
    aggregateId,
    eventType,
    payloadJson: payload.json,
    headersJson: headers.json,
    messageBytes: bytes,
  };
}
