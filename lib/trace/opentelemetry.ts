import { formatTraceparent, type TraceContext, tracestateProblem } from './trace-context.js';

/**
 * Optional OpenTelemetry: `@opentelemetry/api` is not a dependency. When the
 * application has it (and registered an SDK), producers take the active
 * span's context for events written without one, and the consumer starts a
 * span per record linked to the producer's context. Without it, both are
 * skipped in silence.
 *
 * The API keeps its registered providers in a global, so the copy the
 * application installed is found whichever module imports it.
 */

/** The part of `@opentelemetry/api` used here (kept structural: the package is not installed). */
export interface OtelSpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
  traceState?: { serialize(): string };
}

export interface OtelSpan {
  setAttribute(key: string, value: string | number | boolean): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  recordException(exception: Error): unknown;
  end(): void;
}

export interface OtelTracer {
  startActiveSpan<T>(
    name: string,
    options: {
      kind?: number;
      links?: Array<{ context: OtelSpanContext }>;
      attributes?: Record<string, string | number | boolean>;
    },
    fn: (span: OtelSpan) => T,
  ): T;
}

export interface OtelApi {
  context: { active(): unknown };
  trace: {
    getSpanContext(context: unknown): OtelSpanContext | undefined;
    isSpanContextValid(spanContext: OtelSpanContext): boolean;
    getTracer(name: string, version?: string): OtelTracer;
  };
  createTraceState?: (raw?: string) => { serialize(): string };
}

// A variable, not a literal: TypeScript does not look for the module and
// bundlers leave the import alone, so the code builds and runs without it.
const MODULE: string = '@opentelemetry/api';

/** SpanKind.CONSUMER and SpanStatusCode.ERROR of the API (stable enums). */
const SPAN_KIND_CONSUMER = 4;
const SPAN_STATUS_ERROR = 2;

function isApi(candidate: unknown): candidate is OtelApi {
  const api = candidate as Partial<OtelApi> | null | undefined;
  return (
    typeof api?.context?.active === 'function' &&
    typeof api.trace?.getSpanContext === 'function' &&
    typeof api.trace.isSpanContextValid === 'function' &&
    typeof api.trace.getTracer === 'function'
  );
}

/** The API from the imported module: its named exports, or (CommonJS interop) its default export. */
function asApi(module: unknown): OtelApi | undefined {
  if (isApi(module)) return module;
  const fallback = (module as { default?: unknown } | null)?.default;
  return isApi(fallback) ? fallback : undefined;
}

let loading: Promise<OtelApi | undefined> | undefined;

/**
 * `@opentelemetry/api` if it can be imported, else undefined; tried once per
 * process (the promise is cached), and a failed import is not reported.
 */
export function loadOpenTelemetry(): Promise<OtelApi | undefined> {
  loading ??= import(/* @vite-ignore */ MODULE).then(
    (module) => {
      try {
        return asApi(module);
      } catch {
        return undefined;
      }
    },
    () => undefined,
  );
  return loading;
}

/** The trace context of the active span, as `traceparent`/`tracestate`; undefined when none is active. */
export function activeTraceHeaders(api: OtelApi | undefined): TraceHeaders | undefined {
  if (!api) return undefined;
  try {
    const span = api.trace.getSpanContext(api.context.active());
    if (!span || !api.trace.isSpanContextValid(span)) return undefined;
    const traceparent = formatTraceparent(span.traceId, span.spanId, (span.traceFlags & 1) === 1);
    const tracestate = span.traceState?.serialize();
    return tracestate && tracestateProblem(tracestate) === undefined
      ? { traceparent, tracestate }
      : { traceparent };
  } catch {
    return undefined;
  }
}

/** `traceparent` and, optionally, `tracestate` header values. */
export interface TraceHeaders {
  traceparent: string;
  tracestate?: string;
}

/**
 * Runs `fn` inside a CONSUMER span named `name`, linked to the producer's
 * trace context when there is one (OpenTelemetry's advice for messaging: the
 * span's parent is the invocation, the producer is a link). Without the API
 * `fn` just runs. The span records an exception thrown by `fn` and ends when
 * `fn` settles; `fn`'s own outcome is returned or thrown unchanged.
 */
export async function withConsumerSpan<T>(
  api: OtelApi | undefined,
  name: string,
  link: (TraceContext & { tracestate?: string }) | undefined,
  attributes: Record<string, string | number | boolean>,
  fn: () => Promise<T>,
): Promise<T> {
  if (!api) return fn();
  let tracer: OtelTracer;
  const links: Array<{ context: OtelSpanContext }> = [];
  try {
    tracer = api.trace.getTracer('pg-lambda-outbox');
    if (link) {
      const context: OtelSpanContext = {
        traceId: link.traceId,
        spanId: link.spanId,
        traceFlags: link.sampled ? 1 : 0,
        isRemote: true,
      };
      if (link.tracestate && api.createTraceState) context.traceState = api.createTraceState(link.tracestate);
      links.push({ context });
    }
  } catch {
    return fn();
  }
  let started = false;
  const run = tracer.startActiveSpan.bind(tracer);
  try {
    return await run(name, { kind: SPAN_KIND_CONSUMER, links, attributes }, async (span) => {
      started = true;
      try {
        return await fn();
      } catch (error) {
        try {
          if (error instanceof Error) span.recordException(error);
          span.setStatus({
            code: SPAN_STATUS_ERROR,
            message: error instanceof Error ? error.message : undefined,
          });
        } catch {
          // Tracing must never change the record's outcome.
        }
        throw error;
      } finally {
        try {
          span.end();
        } catch {
          // As above.
        }
      }
    });
  } catch (error) {
    // A tracer that failed before running fn must not cost the record.
    if (started) throw error;
    return fn();
  }
}
