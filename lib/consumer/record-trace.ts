import type { Envelope } from '../publish/envelope.js';
import {
  fromXrayTraceHeader,
  parseTraceparent,
  TRACEPARENT,
  TRACESTATE,
  type TraceContext,
  tracestateProblem,
} from '../trace/trace-context.js';
import type { SQSRecord } from './sqs-types.js';

/** The producer's trace context as a handler sees it (`context.trace`). */
export interface RecordTrace extends TraceContext {
  /** The producer's `tracestate`, when it sent one with this `traceparent`. */
  tracestate?: string;
  /**
   * Where it was read: the `traceparent` message attribute (the relay's SQS
   * messages), the envelope's headers (every message, EventBridge included),
   * or SQS's `AWSTraceHeader` system attribute, converted from X-Ray.
   */
  from: 'messageAttribute' | 'envelope' | 'AWSTraceHeader';
}

/**
 * The trace context of a record, from the first of: the `traceparent`
 * message attribute, the envelope's `traceparent` header, the
 * `AWSTraceHeader` system attribute (X-Ray → W3C). An invalid value is passed
 * over for the next source; undefined when none has one.
 */
export function recordTrace(record: SQSRecord, envelope: Pick<Envelope, 'headers'>): RecordTrace | undefined {
  const headers = envelope.headers ?? {};
  const withState = (trace: TraceContext, from: RecordTrace['from']): RecordTrace => {
    const state = headers[TRACESTATE];
    // The envelope's tracestate belongs to the envelope's traceparent only.
    return headers[TRACEPARENT] === trace.traceparent && state !== undefined && !tracestateProblem(state)
      ? { ...trace, tracestate: state, from }
      : { ...trace, from };
  };
  const attribute = parseTraceparent(record.messageAttributes?.[TRACEPARENT]?.stringValue);
  if (attribute) return withState(attribute, 'messageAttribute');
  const header = parseTraceparent(headers[TRACEPARENT]);
  if (header) return withState(header, 'envelope');
  const xray = fromXrayTraceHeader(
    (record.attributes as { AWSTraceHeader?: string } | undefined)?.AWSTraceHeader,
  );
  return xray ? { ...xray, from: 'AWSTraceHeader' } : undefined;
}
