import { beforeEach, describe, expect, it, vi } from 'vitest';
import { activeTraceHeaders, loadOpenTelemetry, withConsumerSpan } from '../../lib/trace/opentelemetry.js';
import { parseTraceparent } from '../../lib/trace/trace-context.js';

// `@opentelemetry/api` is not installed (nor a dependency): this file stands
// in a fake with the API's shape to check what the outbox does when an
// application has it. Other test files run without it.
const otel = vi.hoisted(() => {
  const state = {
    active: undefined as
      | { traceId: string; spanId: string; traceFlags: number; traceState?: { serialize(): string } }
      | undefined,
    spans: [] as Array<{ name: string; options: Record<string, unknown>; events: string[] }>,
  };
  const api = {
    context: { active: () => 'active-context' },
    trace: {
      getSpanContext: () => state.active,
      isSpanContextValid: (sc: { traceId: string; spanId: string }) =>
        /^[0-9a-f]{32}$/.test(sc.traceId) && sc.traceId !== '0'.repeat(32) && sc.spanId !== '0'.repeat(16),
      getTracer: () => ({
        startActiveSpan: (name: string, options: Record<string, unknown>, fn: (span: unknown) => unknown) => {
          const record = { name, options, events: [] as string[] };
          state.spans.push(record);
          return fn({
            setAttribute: () => {},
            setStatus: (status: { code: number }) => record.events.push(`status:${status.code}`),
            recordException: (error: Error) => record.events.push(`exception:${error.message}`),
            end: () => record.events.push('end'),
          });
        },
      }),
    },
    createTraceState: (raw: string) => ({ serialize: () => raw }),
  };
  return { state, api };
});
vi.mock('@opentelemetry/api', () => otel.api);

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const SPAN_ID = 'b7ad6b7169203331';

beforeEach(() => {
  otel.state.active = undefined;
  otel.state.spans.length = 0;
});

describe('with @opentelemetry/api', () => {
  it('is loaded once', async () => {
    const api = await loadOpenTelemetry();
    expect(api?.trace.getTracer).toBeTypeOf('function');
    expect(await loadOpenTelemetry()).toBe(api);
  });

  it('gives the active span context as traceparent (and tracestate)', async () => {
    const api = await loadOpenTelemetry();
    expect(activeTraceHeaders(api)).toBeUndefined();
    otel.state.active = { traceId: TRACE_ID, spanId: SPAN_ID, traceFlags: 1 };
    expect(activeTraceHeaders(api)).toEqual({ traceparent: `00-${TRACE_ID}-${SPAN_ID}-01` });
    otel.state.active = {
      traceId: TRACE_ID,
      spanId: SPAN_ID,
      traceFlags: 0,
      traceState: { serialize: () => 'rojo=00f067aa0ba902b7' },
    };
    expect(activeTraceHeaders(api)).toEqual({
      traceparent: `00-${TRACE_ID}-${SPAN_ID}-00`,
      tracestate: 'rojo=00f067aa0ba902b7',
    });
    otel.state.active = { traceId: '0'.repeat(32), spanId: SPAN_ID, traceFlags: 1 };
    expect(activeTraceHeaders(api)).toBeUndefined();
  });

  it('runs the consumer’s work in a CONSUMER span linked to the producer, recording a failure', async () => {
    const api = await loadOpenTelemetry();
    const producer = { ...parseTraceparent(`00-${TRACE_ID}-${SPAN_ID}-01`)!, tracestate: 'rojo=1' };
    expect(await withConsumerSpan(api, 'process order.created', producer, { a: 1 }, async () => 'ok')).toBe(
      'ok',
    );
    await expect(
      withConsumerSpan(api, 'process order.created', undefined, {}, async () => {
        throw new Error('handler failed');
      }),
    ).rejects.toThrow('handler failed');
    expect(otel.state.spans).toEqual([
      {
        name: 'process order.created',
        options: {
          kind: 4,
          attributes: { a: 1 },
          links: [
            {
              context: {
                traceId: TRACE_ID,
                spanId: SPAN_ID,
                traceFlags: 1,
                isRemote: true,
                traceState: expect.objectContaining({ serialize: expect.any(Function) }),
              },
            },
          ],
        },
        events: ['end'],
      },
      {
        name: 'process order.created',
        options: { kind: 4, attributes: {}, links: [] },
        events: ['exception:handler failed', 'status:2', 'end'],
      },
    ]);
  });

  it('a tracer that throws before running the work does not cost the record', async () => {
    const api = await loadOpenTelemetry();
    const broken = {
      ...api!,
      trace: {
        ...api!.trace,
        getTracer: () => ({
          startActiveSpan: () => {
            throw new Error('broken SDK');
          },
        }),
      },
    };
    expect(await withConsumerSpan(broken, 'process x', undefined, {}, async () => 'ran')).toBe('ran');
  });
});
