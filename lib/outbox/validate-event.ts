import { randomUUID } from 'node:crypto';
import { ValidationError } from '../errors.js';
import { eventBridgeMessage, sqsMessage } from '../publish/messages.js';
import type { TraceHeaders } from '../trace/opentelemetry.js';
import { TRACEPARENT, TRACESTATE, traceparentProblem, tracestateProblem } from '../trace/trace-context.js';
import {
  BROKER_MESSAGE_MAX_BYTES,
  INT64_BOUND,
  LARGE_PAYLOAD_MAX_BYTES,
  MAX_AGGREGATE_ID_LENGTH,
  MAX_AGGREGATE_TYPE_LENGTH,
  MAX_EVENT_SOURCE_BYTES,
  MAX_EVENT_TYPE_LENGTH,
  MAX_HEADERS_BYTES,
  MAX_PAYLOAD_DEPTH,
} from './limits.js';
import type { NewOutboxEvent, OutboxEvent } from './types.js';

export interface ValidateOptions {
  /**
   * Largest message a target accepts, in bytes: the SQS message (body and
   * attributes) and the EventBridge entry (Source, DetailType, Detail) the
   * relay will build for the event must both fit. Default 256 KiB, the limit
   * of EventBridge and of an SQS queue's default configuration.
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

/**
 * What reaches a broker and how, which decides the characters each field may
 * hold. SQS accepts only #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
 * #x10000-#x10FFFF in the body and in attribute values (SendMessage API
 * reference); PostgreSQL cannot store U+0000 in text or jsonb, nor a lone
 * surrogate in jsonb (and `pg` would silently turn one in text into U+FFFD).
 *
 * - Event type, aggregate type and id are SQS message attributes, sent raw: no
 *   C0 control character but tab, LF and CR, no U+FFFE/U+FFFF.
 * - Payload and header strings (and keys) travel inside the JSON body, where
 *   JSON escapes every control character (U+0001 becomes `\u0001`, which SQS
 *   accepts); U+FFFE and U+FFFF are not escaped and reach SQS as they are.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const NOT_IN_ATTRIBUTE = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: U+0000 is what it finds
const NOT_IN_JSON_STRING = /[\u0000\uFFFE\uFFFF]/;
/**
 * Screens a whole JSON text at native speed: JSON.stringify writes a lone
 * surrogate as `\udXXX` and U+0000 as `\u0000`; U+FFFE/U+FFFF stay raw. A hit
 * may be a false alarm (an escaped backslash before "u0000"); the payload is
 * then walked string by string to find the field, if any.
 */
const SUSPECT_IN_JSON_TEXT = /\\u(?:0000|d[89a-f])|[\uFFFE\uFFFF]/;

// Local copies: read on every value of the payload.
const INT64 = INT64_BOUND;
const PAYLOAD_DEPTH = MAX_PAYLOAD_DEPTH;

const isWellFormed = (text: string): boolean =>
  (text as unknown as { isWellFormed(): boolean }).isWellFormed();

/** Why `text` cannot be stored or published, or undefined when it can. */
function badChars(text: string, forbidden: RegExp): string | undefined {
  if (!isWellFormed(text)) {
    const lone = (/\p{Cs}/u.exec(text)?.[0] ?? '').charCodeAt(0);
    return `contains a lone UTF-16 surrogate (\\u${lone.toString(16)}), which PostgreSQL cannot store`;
  }
  const found = forbidden.exec(text)?.[0];
  if (found === undefined) return undefined;
  const code = found.charCodeAt(0);
  if (code === 0) return 'contains a NUL character (\\u0000), which PostgreSQL cannot store';
  return `contains the character U+${code.toString(16).toUpperCase().padStart(4, '0')}, which SQS refuses`;
}

function checkChars(field: string, text: string, forbidden: RegExp): void {
  const problem = badChars(text, forbidden);
  if (problem) throw new ValidationError(field, problem);
}

function requireText(field: string, value: unknown, max: number): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new ValidationError(field, 'must be a non-empty string');
  }
  // varchar(n) counts characters (code points), not UTF-16 units.
  const length = value.length <= max ? value.length : [...value].length;
  if (length > max) {
    throw new ValidationError(field, `must be at most ${max} characters, got ${length}`);
  }
  checkChars(field, value, NOT_IN_ATTRIBUTE);
  return value;
}

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

/** `payload.items[3].name`, `headers["x-trace"]`. */
function formatPath(root: string, keys: readonly (string | number)[]): string {
  let path = root;
  for (const key of keys) {
    if (typeof key === 'number') path += `[${key}]`;
    else path += IDENTIFIER.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
  }
  return path;
}

/**
 * One pass over a value, following JSON.stringify's rules (toJSON, boxed
 * primitives, skipped undefined/function/symbol members), that refuses what
 * JSON.stringify would throw on (BigInt, cycles) with the path of the culprit,
 * and what EventBridge refuses (integers outside 64 bits, nesting deeper than
 * it processes). It also counts the bytes the stored text adds to
 * JSON.stringify's: jsonb prints small numbers that JSON.stringify writes with
 * an exponent as plain digits, and the relay publishes the stored text
 * (compacted: jsonb's spaces after `:` and `,` are dropped, see compactJson).
 */
class JsonWalk {
  /** Bytes `payload::text` has beyond JSON.stringify's output. */
  extraStoredBytes = 0;
  private readonly keys: (string | number)[] = [];
  private readonly containers: object[] = [];

  constructor(
    private readonly root: string,
    private readonly checkStrings: boolean,
  ) {}

  fail(message: string): never {
    throw new ValidationError(formatPath(this.root, this.keys), message);
  }

  /** Returns false when JSON.stringify would leave the value out. */
  visit(input: unknown, key: string | number, depth: number): boolean {
    let value = input;
    if (value !== null && (typeof value === 'object' || typeof value === 'bigint')) {
      const toJSON = (value as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === 'function') {
        try {
          value = toJSON.call(value, String(key));
        } catch (error) {
          throw new ValidationError(
            formatPath(this.root, this.keys),
            `is not JSON-serializable (its toJSON threw: ${(error as Error).message})`,
            { cause: error },
          );
        }
      }
    }
    switch (typeof value) {
      case 'string':
        if (this.checkStrings) this.string(value);
        return true;
      case 'number':
        this.number(value);
        return true;
      case 'boolean':
        return true;
      case 'bigint':
        return this.fail(
          'is a BigInt, which is not JSON-serializable; send it as a string (or as a number within ±2^53)',
        );
      case 'object':
        if (value === null) return true;
        return this.object(value, depth);
      default:
        // undefined, functions and symbols: left out of objects, null in arrays.
        return false;
    }
  }

  private string(value: string, what = ''): void {
    if (!isWellFormed(value) || NOT_IN_JSON_STRING.test(value)) {
      this.fail(`${what}${badChars(value, NOT_IN_JSON_STRING)}`);
    }
  }

  private number(value: number): void {
    if (value >= INT64 || value <= -INT64) {
      this.fail(
        `is ${value}, outside the 64-bit integer range EventBridge accepts ` +
          '(-9223372036854775808 to 9223372036854775807); send it as a string',
      );
    }
    // JSON.stringify writes 1e-7 with an exponent; jsonb stores and prints
    // 0.0000001. Only numbers this small change length.
    if (value !== 0 && value > -1e-6 && value < 1e-6) {
      const text = String(value);
      const e = text.indexOf('e-');
      if (e > 0) {
        const mantissaDigits = text.slice(0, e).replace(/[-.]/g, '').length;
        const exponent = Number(text.slice(e + 2));
        const plain = (value < 0 ? 1 : 0) + 2 + (exponent - 1) + mantissaDigits;
        this.extraStoredBytes += plain - text.length;
      }
    }
  }

  private object(value: object, depth: number): boolean {
    const isArray = Array.isArray(value);
    if (!isArray && Object.getPrototypeOf(value) !== Object.prototype) {
      // Boxed primitives serialize as their primitive.
      if (value instanceof Number) {
        this.number(Number(value));
        return true;
      }
      if (value instanceof String) {
        if (this.checkStrings) this.string(String(value));
        return true;
      }
      if (value instanceof Boolean) return true;
      if (value instanceof BigInt) {
        return this.fail('is a BigInt, which is not JSON-serializable; send it as a string');
      }
    }
    if (depth >= PAYLOAD_DEPTH) this.tooDeep(value);
    this.containers.push(value);
    if (isArray) {
      const array = value as unknown[];
      const length = array.length;
      for (let i = 0; i < length; i++) {
        this.keys.push(i);
        this.visit(array[i], i, depth + 1);
        this.keys.pop();
      }
    } else {
      const record = value as Record<string, unknown>;
      for (const key of Object.keys(record)) {
        this.keys.push(key);
        if (this.visit(record[key], key, depth + 1)) {
          if (this.checkStrings) this.string(key, 'has a name that ');
        }
        this.keys.pop();
      }
    }
    this.containers.pop();
    return true;
  }

  private tooDeep(value: object): never {
    // A cycle recurses until it reaches the depth limit: tell it apart, and
    // name the member that closes the loop (containers[i] is reached through
    // keys[0..i-1]).
    const seen = new Set<object>();
    for (let i = 0; i < this.containers.length; i++) {
      const container = this.containers[i] as object;
      if (seen.has(container)) {
        this.keys.length = i;
        break;
      }
      seen.add(container);
    }
    if (this.keys.length < this.containers.length || seen.has(value)) {
      return this.fail('is a circular reference, which is not JSON-serializable');
    }
    return this.fail(
      `nests deeper than the ${MAX_PAYLOAD_DEPTH} levels EventBridge processes under the envelope`,
    );
  }
}

interface SerializedPayload {
  json: string;
  /** UTF-8 size of the payload as PostgreSQL will store and the relay publish it. */
  storedBytes: number;
  /** What PostgreSQL's text of the payload adds to `json`. */
  extraStoredBytes: number;
}

function serializePayload(field: string, value: unknown): SerializedPayload {
  const walk = new JsonWalk(field, false);
  if (!walk.visit(value, '', 0)) {
    throw new ValidationError(field, `is not JSON-serializable (got ${typeof value})`);
  }
  let json: string;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    throw new ValidationError(field, `is not JSON-serializable (${(error as Error).message})`, {
      cause: error,
    });
  }
  if (SUSPECT_IN_JSON_TEXT.test(json)) {
    // Rare: find the string or key at fault, with its path.
    new JsonWalk(field, true).visit(value, '', 0);
  }
  const extraStoredBytes = walk.extraStoredBytes;
  return { json, storedBytes: Buffer.byteLength(json, 'utf8') + extraStoredBytes, extraStoredBytes };
}

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
