import type { SQSRecord } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { recordTrace } from '../../lib/consumer/record-trace.js';
import { ValidationError } from '../../lib/errors.js';
import type { NewOutboxEvent, OutboxEvent } from '../../lib/outbox/types.js';
import { validateEvent } from '../../lib/outbox/validate-event.js';
import { envelopeJson, eventBridgeMessage, sqsMessage } from '../../lib/publish/messages.js';
import { activeTraceHeaders, loadOpenTelemetry, withConsumerSpan } from '../../lib/trace/opentelemetry.js';
import {
  formatTraceparent,
  fromXrayTraceHeader,
  parseTraceparent,
  toXrayTraceHeader,
  traceparentProblem,
  tracestateProblem,
} from '../../lib/trace/trace-context.js';

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const SPAN_ID = 'b7ad6b7169203331';
const TRACEPARENT = `00-${TRACE_ID}-${SPAN_ID}-01`;
const XRAY = `Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=${SPAN_ID};Sampled=1`;

describe('traceparent (W3C)', () => {
  it('accepts version-traceid-parentid-flags in lowercase hex and reads its fields', () => {
    expect(traceparentProblem(TRACEPARENT)).toBeUndefined();
    expect(parseTraceparent(TRACEPARENT)).toEqual({
      traceparent: TRACEPARENT,
      traceId: TRACE_ID,
      spanId: SPAN_ID,
      sampled: true,
    });
    expect(parseTraceparent(`00-${TRACE_ID}-${SPAN_ID}-00`)?.sampled).toBe(false);
    // Only bit 0 is "sampled"; other flag bits are kept as written.
    expect(parseTraceparent(`00-${TRACE_ID}-${SPAN_ID}-03`)?.sampled).toBe(true);
    expect(parseTraceparent(`00-${TRACE_ID}-${SPAN_ID}-02`)?.sampled).toBe(false);
    expect(formatTraceparent(TRACE_ID, SPAN_ID, true)).toBe(TRACEPARENT);
    expect(formatTraceparent(TRACE_ID, SPAN_ID, false)).toBe(`00-${TRACE_ID}-${SPAN_ID}-00`);
  });

  it.each([
    ['upper case', TRACEPARENT.toUpperCase(), /lowercase hex/],
    ['a short trace id', `00-${TRACE_ID.slice(1)}-${SPAN_ID}-01`, /2-32-16-2/],
    ['a long span id', `00-${TRACE_ID}-${SPAN_ID}0-01`, /2-32-16-2/],
    ['extra fields', `${TRACEPARENT}-xyz`, /2-32-16-2/],
    ['white space', ` ${TRACEPARENT}`, /2-32-16-2/],
    ['a fake', '00-abc-def-01', /2-32-16-2/],
    ['version ff', `ff-${TRACE_ID}-${SPAN_ID}-01`, /version ff/],
    ['an all-zero trace id', `00-${'0'.repeat(32)}-${SPAN_ID}-01`, /all-zero trace id/],
    ['an all-zero parent id', `00-${TRACE_ID}-${'0'.repeat(16)}-01`, /all-zero parent id/],
    ['a number', 42, /must be a string/],
  ])('refuses %s', (_what, value, problem) => {
    expect(traceparentProblem(value)).toMatch(problem);
    expect(parseTraceparent(value)).toBeUndefined();
  });
});

describe('tracestate (W3C)', () => {
  it.each([
    'rojo=00f067aa0ba902b7',
    'congo=t61rcWkgMzE, rojo=00f067aa0ba902b7',
    'tenant@vendor=a b',
    'a=1,,b=2',
  ])('accepts %j', (value) => expect(tracestateProblem(value)).toBeUndefined());
  it.each([
    ['an empty list', '', /at least one/],
    ['an upper-case key', 'Upper=1', /key=value/],
    ['a member without =', 'novalue', /key=value/],
    ['a non-ASCII value', 'k=\u00e9', /key=value/],
    ['= in a value', 'k=a=b', /key=value/],
    ['33 members', Array.from({ length: 33 }, (_, i) => `k${i}=v`).join(','), /at most 32/],
    ['600 characters', `k=${'v'.repeat(600)}`, /at most 512 characters/],
  ])('refuses %s', (_what, value, problem) => expect(tracestateProblem(value)).toMatch(problem));
});

describe('X-Ray trace header ↔ W3C', () => {
  it('converts a traceparent to Root=1-<8 hex>-<24 hex>;Parent=<span>;Sampled=<0|1>', () => {
    expect(toXrayTraceHeader(parseTraceparent(TRACEPARENT)!)).toBe(XRAY);
    expect(toXrayTraceHeader({ traceId: TRACE_ID, spanId: SPAN_ID, sampled: false })).toBe(
      XRAY.replace('Sampled=1', 'Sampled=0'),
    );
  });

  it('converts back, field order and extra fields notwithstanding', () => {
    expect(fromXrayTraceHeader(XRAY)).toEqual(parseTraceparent(TRACEPARENT));
    expect(
      fromXrayTraceHeader(
        `Sampled=1;Parent=${SPAN_ID.toUpperCase()};Root=1-0AF76519-16cd43dd8448eb211c80319c;Lineage=a:1`,
      ),
    ).toEqual(parseTraceparent(TRACEPARENT));
    const unsampled = `00-${TRACE_ID}-${SPAN_ID}-00`;
    expect(fromXrayTraceHeader(XRAY.replace('Sampled=1', 'Sampled=?'))?.traceparent).toBe(unsampled);
    expect(
      fromXrayTraceHeader(`Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=${SPAN_ID}`)?.traceparent,
    ).toBe(unsampled);
  });

  it.each([
    ['no Parent', 'Root=1-0af76519-16cd43dd8448eb211c80319c;Sampled=1'],
    ['a short Root', `Root=1-0af76519-16cd43dd;Parent=${SPAN_ID};Sampled=1`],
    ['another Root version', `Root=2-0af76519-16cd43dd8448eb211c80319c;Parent=${SPAN_ID}`],
    ['an all-zero trace id', `Root=1-00000000-${'0'.repeat(24)};Parent=${SPAN_ID}`],
    ['garbage', 'not a header'],
    ['a number', 7],
  ])('gives nothing for %s', (_what, header) => expect(fromXrayTraceHeader(header)).toBeUndefined());
});

const row = (headers: Record<string, string>): OutboxEvent => ({
  id: '6f9619ff-8b86-4011-b42d-00c04fc964ff',
  seq: '1',
  aggregateType: 'order',
  aggregateId: 'o-1',
  eventType: 'order.created',
  payload: undefined,
  payloadJson: '{"total": 42}',
  headers,
  createdAt: new Date('2026-01-02T03:04:05.678Z'),
  attempts: 1,
  deliveredTargets: [],
});

describe('messages with trace context', () => {
  it('SQS: a traceparent attribute (counted in the size) and the AWSTraceHeader system attribute (not counted)', () => {
    const traced = sqsMessage(row({ traceparent: TRACEPARENT, tracestate: 'rojo=1' }), { fifo: false });
    expect(traced.entry.MessageAttributes?.traceparent).toEqual({
      DataType: 'String',
      StringValue: TRACEPARENT,
    });
    expect(Object.keys(traced.entry.MessageAttributes ?? {})).toHaveLength(5);
    expect(traced.entry.MessageSystemAttributes).toEqual({
      AWSTraceHeader: { DataType: 'String', StringValue: XRAY },
    });
    // Exact size: the body plus every attribute's name, type and value.
    let expected = Buffer.byteLength(traced.entry.MessageBody as string);
    for (const [name, value] of Object.entries(traced.entry.MessageAttributes ?? {})) {
      expected +=
        Buffer.byteLength(name) + Buffer.byteLength(value.DataType!) + Buffer.byteLength(value.StringValue!);
    }
    expect(traced.bytes).toBe(expected);
    const plain = sqsMessage(row({}), { fifo: false });
    const bodyGrowth =
      Buffer.byteLength(envelopeJson(row({ traceparent: TRACEPARENT, tracestate: 'rojo=1' }))) -
      Buffer.byteLength(envelopeJson(row({})));
    expect(traced.bytes - plain.bytes).toBe(bodyGrowth + 'traceparent'.length + 'String'.length + 55);
    expect(plain.entry.MessageSystemAttributes).toBeUndefined();
    expect(plain.entry.MessageAttributes?.traceparent).toBeUndefined();
  });

  it('a row whose traceparent is not valid still becomes a message, without trace attributes', () => {
    const message = sqsMessage(row({ traceparent: '00-abc-def-01' }), { fifo: true });
    expect(message.entry.MessageAttributes?.traceparent).toBeUndefined();
    expect(message.entry.MessageSystemAttributes).toBeUndefined();
    expect(JSON.parse(message.entry.MessageBody!).headers).toEqual({ traceparent: '00-abc-def-01' });
    expect(
      eventBridgeMessage(row({ traceparent: 'x' }), { busName: 'b', source: 's' }).entry.TraceHeader,
    ).toBe(undefined);
  });

  it('EventBridge: TraceHeader in X-Ray format, from traceparent first, else x-amzn-trace-id', () => {
    const options = { busName: 'b', source: 's' };
    const traced = eventBridgeMessage(
      row({ traceparent: TRACEPARENT, 'x-amzn-trace-id': 'Root=1-x' }),
      options,
    );
    expect(traced.entry.TraceHeader).toBe(XRAY);
    const given = 'Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1';
    expect(eventBridgeMessage(row({ 'x-amzn-trace-id': given }), options).entry.TraceHeader).toBe(given);
    // Not an X-Ray trace header: not passed on (test/unit/trace-header.test.ts).
    expect(eventBridgeMessage(row({ 'x-amzn-trace-id': 'Root=1-x' }), options).entry.TraceHeader).toBe(
      undefined,
    );
    // EventBridge does not count TraceHeader in the entry size.
    expect(traced.bytes).toBe(
      eventBridgeMessage(row({ traceparent: TRACEPARENT, 'x-amzn-trace-id': 'Root=1-x' }), options).bytes,
    );
  });
});

const event = (extra: Partial<NewOutboxEvent> = {}): NewOutboxEvent => ({
  aggregateType: 'order',
  aggregateId: 'o-1',
  eventType: 'order.created',
  payload: { total: 42 },
  ...extra,
});

function validationError(run: () => unknown): ValidationError {
  try {
    run();
  } catch (error) {
    if (error instanceof ValidationError) return error;
    throw error;
  }
  throw new Error('expected a ValidationError');
}

describe('validateEvent: trace context', () => {
  it('stores the trace option as the traceparent/tracestate headers, and sizes the message with them', () => {
    const valid = validateEvent(event({ trace: { traceparent: TRACEPARENT, tracestate: 'rojo=1' } }));
    expect(JSON.parse(valid.headersJson)).toEqual({ traceparent: TRACEPARENT, tracestate: 'rojo=1' });
    const same = validateEvent(event({ headers: { traceparent: TRACEPARENT, tracestate: 'rojo=1' } }));
    expect(same.headersJson).toBe(valid.headersJson);
    const plain = validateEvent(event());
    const traced = sqsMessage(
      { ...row(JSON.parse(valid.headersJson)), payloadJson: valid.payloadJson },
      {
        fifo: false,
      },
    );
    const untraced = sqsMessage({ ...row({}), payloadJson: plain.payloadJson }, { fifo: false });
    expect(valid.messageBytes.sqs - plain.messageBytes.sqs).toBe(traced.bytes - untraced.bytes);
  });

  it('accepts the same context in both places, keeps other headers, and does not change the caller’s object', () => {
    const headers = { 'x-correlation-id': 'c-1' };
    const valid = validateEvent(event({ headers, trace: { traceparent: TRACEPARENT } }));
    expect(JSON.parse(valid.headersJson)).toEqual({ 'x-correlation-id': 'c-1', traceparent: TRACEPARENT });
    expect(headers).toEqual({ 'x-correlation-id': 'c-1' });
    expect(() =>
      validateEvent(event({ headers: { traceparent: TRACEPARENT }, trace: { traceparent: TRACEPARENT } })),
    ).not.toThrow();
  });

  it.each([
    [{ headers: { traceparent: '00-abc-def-01' } }, 'event.headers.traceparent', /W3C traceparent/],
    [{ trace: { traceparent: TRACEPARENT.toUpperCase() } }, 'event.trace.traceparent', /lowercase/],
    [{ trace: { traceparent: `00-${'0'.repeat(32)}-${SPAN_ID}-01` } }, 'event.trace.traceparent', /all-zero/],
    [{ trace: { traceparent: TRACEPARENT, tracestate: 'Bad' } }, 'event.trace.tracestate', /tracestate/],
    [{ headers: { tracestate: 'rojo=1' } }, 'event.headers.tracestate', /needs a traceparent/],
    [
      { headers: { traceparent: TRACEPARENT }, trace: { traceparent: `00-${TRACE_ID}-${SPAN_ID}-00` } },
      'event.trace',
      /differs/,
    ],
    [{ trace: 'x' }, 'event.trace', /must be an object/],
    [{ trace: { traceparent: TRACEPARENT, baggage: 'x' } }, 'event.trace.baggage', /not a trace option/],
  ])('refuses %j naming the field', (extra, field, message) => {
    const error = validationError(() => validateEvent(event(extra as Partial<NewOutboxEvent>)));
    expect(error.field).toBe(field);
    expect(error.message).toMatch(message);
  });

  it('takes the ambient (OpenTelemetry) context only when the event brings none', () => {
    const ambient = { traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`, tracestate: 'otel=1' };
    const filled = validateEvent(event(), {}, 'event', ambient);
    expect(JSON.parse(filled.headersJson)).toEqual(ambient);
    const explicit = validateEvent(event({ trace: { traceparent: TRACEPARENT } }), {}, 'event', ambient);
    expect(JSON.parse(explicit.headersJson)).toEqual({ traceparent: TRACEPARENT });
    const inHeaders = validateEvent(event({ headers: { traceparent: TRACEPARENT } }), {}, 'event', ambient);
    expect(JSON.parse(inHeaders.headersJson)).toEqual({ traceparent: TRACEPARENT });
  });
});

describe('recordTrace: what a handler sees', () => {
  const other = `00-${'a'.repeat(32)}-${'b'.repeat(16)}-00`;
  const record = (messageAttribute?: string, awsTraceHeader?: string): SQSRecord =>
    ({
      messageId: 'm-1',
      attributes: awsTraceHeader ? { AWSTraceHeader: awsTraceHeader } : {},
      messageAttributes: messageAttribute
        ? { traceparent: { dataType: 'String', stringValue: messageAttribute } }
        : {},
    }) as unknown as SQSRecord;

  it('takes the message attribute, then the envelope headers, then AWSTraceHeader', () => {
    expect(recordTrace(record(TRACEPARENT, 'Root=1-x'), { headers: { traceparent: other } })).toMatchObject({
      traceparent: TRACEPARENT,
      from: 'messageAttribute',
    });
    expect(recordTrace(record(undefined, XRAY), { headers: { traceparent: other } })).toMatchObject({
      traceparent: other,
      traceId: 'a'.repeat(32),
      spanId: 'b'.repeat(16),
      sampled: false,
      from: 'envelope',
    });
    expect(recordTrace(record(undefined, XRAY), { headers: {} })).toEqual({
      ...parseTraceparent(TRACEPARENT),
      from: 'AWSTraceHeader',
    });
    expect(recordTrace(record(), { headers: {} })).toBeUndefined();
  });

  it('passes over an invalid source, and gives tracestate only with its own traceparent', () => {
    expect(recordTrace(record('garbage', XRAY), { headers: { traceparent: 'nope' } })?.from).toBe(
      'AWSTraceHeader',
    );
    expect(
      recordTrace(record(TRACEPARENT), { headers: { traceparent: TRACEPARENT, tracestate: 'rojo=1' } }),
    ).toMatchObject({ tracestate: 'rojo=1', from: 'messageAttribute' });
    expect(
      recordTrace(record(TRACEPARENT), { headers: { traceparent: other, tracestate: 'rojo=1' } }),
    ).not.toHaveProperty('tracestate');
  });
});

describe('without @opentelemetry/api', () => {
  it('loads nothing, once, silently; producers and consumers go on without it', async () => {
    const first = loadOpenTelemetry();
    expect(loadOpenTelemetry()).toBe(first);
    expect(await first).toBeUndefined();
    expect(activeTraceHeaders(undefined)).toBeUndefined();
    expect(await withConsumerSpan(undefined, 'process x', undefined, {}, async () => 'ran')).toBe('ran');
  });
});
