// EventBridge's TraceHeader comes from an event's `x-amzn-trace-id` header
// when it has no traceparent. Rows may hold anything (written with SQL, an
// older producer): only a well-formed X-Ray trace header is passed to AWS.
import { describe, expect, it } from 'vitest';
import type { OutboxEvent } from '../../lib/outbox/types.js';
import { eventBridgeMessage } from '../../lib/publish/messages.js';
import { MAX_XRAY_HEADER_LENGTH, validXrayTraceHeader } from '../../lib/trace/trace-context.js';

const ROOT = 'Root=1-5759e988-bd862e3fe1be46a994272793';

const row = (headers: Record<string, string>): OutboxEvent => ({
  id: '6f1c5a57-3b2e-4c3f-9d4e-2a1b0c9d8e7f',
  seq: '1',
  aggregateType: 'order',
  aggregateId: 'o-1',
  eventType: 'order.created',
  payload: undefined,
  payloadJson: '{}',
  headers,
  createdAt: new Date(0),
  attempts: 1,
  deliveredTargets: [],
});

const traceHeaderOf = (header: string) =>
  eventBridgeMessage(row({ 'x-amzn-trace-id': header }), { busName: 'b', source: 's' }).entry.TraceHeader;

describe('the X-Ray trace header passed to EventBridge', () => {
  it.each([
    ROOT,
    `${ROOT};Parent=53995c3f42cd8ad8;Sampled=1`,
    `${ROOT};Parent=53995C3F42CD8AD8;Sampled=0`,
    `${ROOT};Sampled=?`,
    `Sampled=1;${ROOT}`,
    `${ROOT};Parent=53995c3f42cd8ad8;Sampled=1;Lineage=a87bd80c:0`,
    `Self=1-67891234-12456789abcdef0123456789;${ROOT}`,
    `${ROOT};Parent=53995c3f42cd8ad8;`,
  ])('passes %s on as it is', (header) => {
    expect(validXrayTraceHeader(header)).toBe(header);
    expect(traceHeaderOf(header)).toBe(header);
  });

  it.each([
    ['no Root', 'Parent=53995c3f42cd8ad8;Sampled=1'],
    ['a short Root', 'Root=1-x'],
    ['a Root of another version', 'Root=2-5759e988-bd862e3fe1be46a994272793'],
    ['a Root with non-hex digits', 'Root=1-5759e98g-bd862e3fe1be46a994272793'],
    ['a short Parent', `${ROOT};Parent=53995c3f`],
    ['a Sampled of another value', `${ROOT};Sampled=yes`],
    ['a field twice', `${ROOT};${ROOT}`],
    ['an unknown field', `${ROOT};Evil=1`],
    ['spaces', `${ROOT}; Parent=53995c3f42cd8ad8`],
    ['a control character', `${ROOT};Sampled=1\u009b2J`],
    ['a newline', `${ROOT}\nX-Injected: 1`],
    ['an empty value', ''],
    ['a leading separator', `;${ROOT}`],
    ['too long a Lineage', `${ROOT};Lineage=${'a'.repeat(MAX_XRAY_HEADER_LENGTH)}`],
  ])('drops one with %s', (_what, header) => {
    expect(traceHeaderOf(header)).toBeUndefined();
    expect(validXrayTraceHeader(header)).toBeUndefined();
  });

  it('is bounded in length and reads only strings', () => {
    expect(validXrayTraceHeader(`${ROOT};Lineage=${'a'.repeat(100)}`)).toBeDefined();
    expect(
      validXrayTraceHeader(`${ROOT};Lineage=${'a'.repeat(128)};Parent=53995c3f42cd8ad8;Sampled=1`),
    ).toBeDefined();
    expect(validXrayTraceHeader(`${ROOT};Lineage=${'a'.repeat(129)}`)).toBeUndefined();
    expect(validXrayTraceHeader(42)).toBeUndefined();
    expect(validXrayTraceHeader(undefined)).toBeUndefined();
    // The capitalised name is read too, as before.
    expect(
      eventBridgeMessage(row({ 'X-Amzn-Trace-Id': ROOT }), { busName: 'b', source: 's' }).entry.TraceHeader,
    ).toBe(ROOT);
  });
});
