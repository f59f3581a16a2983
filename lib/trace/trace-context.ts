/**
 * W3C trace context (`traceparent`, `tracestate`) and its AWS X-Ray form
 * (`AWSTraceHeader` on SQS, `TraceHeader` on EventBridge). Pure functions: no
 * I/O, no dependency on OpenTelemetry (see ./opentelemetry.ts for that).
 *
 * https://www.w3.org/TR/trace-context/ and
 * https://docs.aws.amazon.com/xray/latest/devguide/xray-concepts.html#xray-concepts-tracingheader
 */

/** The header names the outbox stores trace context under (row `headers`, envelope `headers`). */
export const TRACEPARENT = 'traceparent';
export const TRACESTATE = 'tracestate';

/** A parsed `traceparent`. */
export interface TraceContext {
  /** The `traceparent` as written: `00-<trace id>-<span id>-<flags>`. */
  traceparent: string;
  /** 32 lowercase hex digits, not all zero. */
  traceId: string;
  /** The parent span's id: 16 lowercase hex digits, not all zero. */
  spanId: string;
  /** Bit 0 of the trace flags. */
  sampled: boolean;
}

const TRACEPARENT_PATTERN = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const ZERO_TRACE_ID = '0'.repeat(32);
const ZERO_SPAN_ID = '0'.repeat(16);

/**
 * Why `value` is not a valid `traceparent`, or undefined when it is.
 * Four dash-separated fields of lowercase hex: version (2, not `ff`), trace id
 * (32, not all zero), parent id (16, not all zero), flags (2).
 */
export function traceparentProblem(value: unknown): string | undefined {
  if (typeof value !== 'string') return 'must be a string';
  const match = TRACEPARENT_PATTERN.exec(value);
  if (!match) {
    return 'must be a W3C traceparent: version-traceid-parentid-flags in lowercase hex (2-32-16-2 digits), e.g. 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  }
  if (match[1] === 'ff') return 'has version ff, which W3C trace context forbids';
  if (match[2] === ZERO_TRACE_ID) return 'has an all-zero trace id';
  if (match[3] === ZERO_SPAN_ID) return 'has an all-zero parent id';
  return undefined;
}

/** The trace context of a valid `traceparent`, undefined for anything else. */
export function parseTraceparent(value: unknown): TraceContext | undefined {
  if (traceparentProblem(value) !== undefined) return undefined;
  const text = value as string;
  return {
    traceparent: text,
    traceId: text.slice(3, 35),
    spanId: text.slice(36, 52),
    sampled: (Number.parseInt(text.slice(53, 55), 16) & 1) === 1,
  };
}

/** `00-<trace id>-<span id>-<01|00>`; the inputs are taken as valid. */
export function formatTraceparent(traceId: string, spanId: string, sampled: boolean): string {
  return `00-${traceId}-${spanId}-${sampled ? '01' : '00'}`;
}

// tracestate: at most 32 list members `key=value`, separated by commas
// (optional white space around them). A key is a simple key or
// tenant@system; a value is 1-256 printable ASCII characters other than `,`
// and `=`, not ending in a space.
const TRACESTATE_MEMBER =
  /^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;
/** Largest `tracestate` accepted: what W3C asks every system to propagate. */
export const MAX_TRACESTATE_LENGTH = 512;

/** Why `value` is not a valid `tracestate`, or undefined when it is. */
export function tracestateProblem(value: unknown): string | undefined {
  if (typeof value !== 'string') return 'must be a string';
  if (value.length > MAX_TRACESTATE_LENGTH) {
    return `must be at most ${MAX_TRACESTATE_LENGTH} characters, got ${value.length}`;
  }
  const members = value.split(',').map((m) => m.replace(/^[ \t]+|[ \t]+$/g, ''));
  const listed = members.filter((m) => m !== '');
  if (listed.length === 0) return 'must hold at least one key=value list member';
  if (listed.length > 32) return `must hold at most 32 list members, got ${listed.length}`;
  const bad = listed.find((m) => !TRACESTATE_MEMBER.test(m));
  if (bad !== undefined) {
    return `must be a W3C tracestate (comma-separated key=value members; keys lowercase), not "${bad.slice(0, 64)}"`;
  }
  return undefined;
}

/**
 * The X-Ray trace header for a trace context, as SQS's `AWSTraceHeader`
 * system attribute and EventBridge's `TraceHeader` take it:
 * `Root=1-<first 8 hex of the trace id>-<remaining 24>;Parent=<span id>;Sampled=<0|1>`.
 */
export function toXrayTraceHeader(trace: Pick<TraceContext, 'traceId' | 'spanId' | 'sampled'>): string {
  return `Root=1-${trace.traceId.slice(0, 8)}-${trace.traceId.slice(8)};Parent=${trace.spanId};Sampled=${trace.sampled ? 1 : 0}`;
}

const XRAY_ROOT = /^1-([0-9a-fA-F]{8})-([0-9a-fA-F]{24})$/;
const XRAY_PARENT = /^[0-9a-fA-F]{16}$/;

/** Longest X-Ray trace header passed on (the three usual fields take 81 characters). */
export const MAX_XRAY_HEADER_LENGTH = 256;

/** The fields an X-Ray trace header may have, each with the form of its value. */
const XRAY_FIELDS: ReadonlyMap<string, RegExp> = new Map([
  ['Root', XRAY_ROOT],
  ['Parent', XRAY_PARENT],
  ['Sampled', /^[01?]$/],
  // Set by Lambda's loop detection (`Lineage=a87bd80c:0`).
  ['Lineage', /^[0-9A-Za-z:|]{1,128}$/],
  // Set by load balancers.
  ['Self', XRAY_ROOT],
]);

/**
 * The header when it is a well-formed X-Ray trace header, else undefined:
 * `Root=1-<8 hex>-<24 hex>` required, `Parent=<16 hex>`, `Sampled=0|1|?`,
 * `Lineage` and `Self` optional, each at most once, nothing else, at most
 * {@link MAX_XRAY_HEADER_LENGTH} characters. What an event's headers say
 * is passed to AWS only in this form (EventBridge's `TraceHeader`).
 */
export function validXrayTraceHeader(header: unknown): string | undefined {
  if (typeof header !== 'string' || header.length > MAX_XRAY_HEADER_LENGTH) return undefined;
  const seen = new Set<string>();
  for (const part of header.split(';')) {
    if (part === '' && seen.size > 0) continue; // a trailing `;`
    const eq = part.indexOf('=');
    const key = part.slice(0, eq);
    const form = eq > 0 ? XRAY_FIELDS.get(key) : undefined;
    if (!form || seen.has(key) || !form.test(part.slice(eq + 1))) return undefined;
    seen.add(key);
  }
  return seen.has('Root') ? header : undefined;
}

/**
 * The trace context of an X-Ray trace header (`Root=1-…;Parent=…;Sampled=…`,
 * fields in any order, others such as `Lineage` ignored), or undefined when
 * it has no valid `Root` and `Parent` (a W3C traceparent needs both).
 * `Sampled=1` is sampled; `0`, `?` or no `Sampled` is not.
 */
export function fromXrayTraceHeader(header: unknown): TraceContext | undefined {
  if (typeof header !== 'string' || header.length > 1024) return undefined;
  const fields = new Map<string, string>();
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0) fields.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  const root = XRAY_ROOT.exec(fields.get('Root') ?? '');
  const parent = fields.get('Parent') ?? '';
  if (!root || !XRAY_PARENT.test(parent)) return undefined;
  const traceId = `${root[1]}${root[2]}`.toLowerCase();
  const spanId = parent.toLowerCase();
  if (traceId === ZERO_TRACE_ID || spanId === ZERO_SPAN_ID) return undefined;
  const sampled = fields.get('Sampled') === '1';
  return { traceparent: formatTraceparent(traceId, spanId, sampled), traceId, spanId, sampled };
}
