import { randomUUID } from 'node:crypto';
import {
  CreateEventBusCommand,
  type PutEventsRequestEntry,
  PutRuleCommand,
  PutTargetsCommand,
} from '@aws-sdk/client-eventbridge';
import {
  ReceiveMessageCommand,
  type SendMessageBatchRequestEntry,
  SendMessageCommand,
} from '@aws-sdk/client-sqs';
import { beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createConsumer } from '../lib/consumer/consumer.js';
import type { HandlerContext } from '../lib/consumer/handlers.js';
import { ValidationError } from '../lib/errors.js';
import { enqueueEvent, enqueueEvents } from '../lib/outbox/enqueue.js';
import type { NewOutboxEvent } from '../lib/outbox/types.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import { awsClients, createQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';
import { deleteAcknowledged, receiveBatch, type TestQueue } from './support/sqs-batch.js';

// `@opentelemetry/api` is not installed. This file stands a fake with the
// API's shape in its place (the other files run without it): its active span
// is what producers take when they give no trace context, and its tracer
// records the consumer's spans.
const otel = vi.hoisted(() => {
  const state = {
    active: undefined as { traceId: string; spanId: string; traceFlags: number } | undefined,
    spans: [] as Array<{ name: string; options: { links?: Array<{ context: { traceId: string } }> } }>,
  };
  const api = {
    context: { active: () => 'active-context' },
    trace: {
      getSpanContext: () => state.active,
      isSpanContextValid: () => true,
      getTracer: () => ({
        startActiveSpan: (name: string, options: never, fn: (span: unknown) => unknown) => {
          state.spans.push({ name, options });
          return fn({ setAttribute() {}, setStatus() {}, recordException() {}, end() {} });
        },
      }),
    },
  };
  return { state, api };
});
vi.mock('@opentelemetry/api', () => otel.api);

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN_ID = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE_ID}-${SPAN_ID}-01`;
const XRAY = `Root=1-4bf92f35-77b34da6a3ce929d0e0e4736;Parent=${SPAN_ID};Sampled=1`;

const db = useTestDatabase();
const aws = awsClients();
// The relay's own clients, whose requests are recorded as sent: what went on
// the wire, whatever the emulator keeps of it.
const relayAws = awsClients();
const sentSqs: SendMessageBatchRequestEntry[] = [];
const sentEvents: PutEventsRequestEntry[] = [];
relayAws.sqs.middlewareStack.add(
  (next) => async (args) => {
    const input = args.input as { Entries?: SendMessageBatchRequestEntry[] };
    sentSqs.push(...(input.Entries ?? []));
    return next(args);
  },
  { step: 'initialize' },
);
relayAws.eventBridge.middlewareStack.add(
  (next) => async (args) => {
    const input = args.input as { Entries?: PutEventsRequestEntry[] };
    sentEvents.push(...(input.Entries ?? []));
    return next(args);
  },
  { step: 'initialize' },
);

let direct: TestQueue;
let fromBus: TestQueue;
let bus: string;

beforeAll(async () => {
  direct = await createQueue(aws.sqs, uniqueName('trace-direct'));
  fromBus = await createQueue(aws.sqs, uniqueName('trace-bus'));
  bus = uniqueName('trace-bus');
  await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
  const rule = uniqueName('trace-rule');
  await aws.eventBridge.send(
    new PutRuleCommand({
      Name: rule,
      EventBusName: bus,
      EventPattern: JSON.stringify({ source: ['outbox'], 'detail-type': [{ prefix: 'order.' }] }),
    }),
  );
  await aws.eventBridge.send(
    new PutTargetsCommand({ Rule: rule, EventBusName: bus, Targets: [{ Id: 'consumer', Arn: fromBus.arn }] }),
  );
});

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, processed_events');
  otel.state.active = undefined;
  otel.state.spans.length = 0;
  sentSqs.length = 0;
  sentEvents.length = 0;
});

const relayTo = async (routes: RouteConfig[]) =>
  drainUntilIdle(emulatorRelay(db.pool, relayAws, routes).relay);
const queueRoute = (): RouteConfig[] => [
  { match: 'order.*', targets: [{ type: 'sqs', queueUrl: direct.url }] },
];
const busRoute = (): RouteConfig[] => [
  { match: 'order.*', targets: [{ type: 'eventbridge', busName: bus }] },
];

const orderEvent = (extra: Partial<NewOutboxEvent> = {}): NewOutboxEvent => ({
  aggregateType: 'order',
  aggregateId: `o-${randomUUID()}`,
  eventType: 'order.created',
  payload: { total: 42 },
  ...extra,
});

/** The context each event's handler saw, by event id. */
async function consume(queue: TestQueue, expected: number): Promise<Map<string, HandlerContext>> {
  const seen = new Map<string, HandlerContext>();
  const consumer = createConsumer({
    name: 'trace-consumer',
    pool: db.pool,
    handlers: {},
    fallback: async (event, _tx, context) => {
      seen.set(event.id, context);
    },
  });
  const deadline = Date.now() + 15_000;
  while (seen.size < expected && Date.now() < deadline) {
    const event = await receiveBatch(aws.sqs, queue);
    if (event.Records.length === 0) continue;
    const result = await consumer.handleSqsEvent(event);
    expect(result.batchItemFailures).toEqual([]);
    await deleteAcknowledged(aws.sqs, queue, event, result);
  }
  expect(seen.size).toBe(expected);
  return seen;
}

async function storedHeaders(id: string): Promise<Record<string, string>> {
  const { rows } = await db.pool.query('SELECT headers FROM outbox_events WHERE id = $1', [id]);
  return rows[0].headers;
}

describe('trace context: producer → relay → broker → consumer', () => {
  it('through SQS: the handler sees the trace id written with the event', async () => {
    const id = await enqueueEvent(
      db.pool,
      orderEvent({ trace: { traceparent: TRACEPARENT, tracestate: 'rojo=00f067aa0ba902b7' } }),
    );
    expect(await storedHeaders(id)).toEqual({
      traceparent: TRACEPARENT,
      tracestate: 'rojo=00f067aa0ba902b7',
    });
    expect(await relayTo(queueRoute())).toMatchObject({ published: 1, deadLettered: 0 });

    // What the relay sent: the traceparent message attribute and AWSTraceHeader (X-Ray).
    expect(sentSqs).toHaveLength(1);
    expect(sentSqs[0]!.MessageAttributes?.traceparent).toEqual({
      DataType: 'String',
      StringValue: TRACEPARENT,
    });
    expect(sentSqs[0]!.MessageSystemAttributes).toEqual({
      AWSTraceHeader: { DataType: 'String', StringValue: XRAY },
    });

    // What the queue holds (received, then made visible again for the consumer).
    const { Messages = [] } = await aws.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: direct.url,
        MessageSystemAttributeNames: ['AWSTraceHeader'],
        MessageAttributeNames: ['All'],
        WaitTimeSeconds: 5,
        VisibilityTimeout: 0,
      }),
    );
    expect(Messages).toHaveLength(1);
    expect(Messages[0]!.MessageAttributes?.traceparent?.StringValue).toBe(TRACEPARENT);
    // moto 5.1.22 (and MiniStack 1.5.33) drop MessageSystemAttributes on
    // SendMessageBatch (they keep it on SendMessage: see the AWSTraceHeader
    // test below); SQS keeps it. So it is checked where it arrives.
    const kept = Messages[0]!.Attributes?.AWSTraceHeader;
    if (kept !== undefined) expect(kept).toBe(XRAY);

    const seen = await consume(direct, 1);
    expect(seen.get(id)?.trace).toEqual({
      traceparent: TRACEPARENT,
      traceId: TRACE_ID,
      spanId: SPAN_ID,
      sampled: true,
      tracestate: 'rojo=00f067aa0ba902b7',
      from: 'messageAttribute',
    });
  });

  it('through EventBridge (bus → rule → queue): TraceHeader on the entry, the trace id from the envelope', async () => {
    const id = await enqueueEvent(
      db.pool,
      orderEvent({ headers: { traceparent: TRACEPARENT, 'x-request': 'r-1' } }),
    );
    expect(await relayTo(busRoute())).toMatchObject({ published: 1, deadLettered: 0 });
    expect(sentEvents).toHaveLength(1);
    expect(sentEvents[0]!.TraceHeader).toBe(XRAY);

    const seen = await consume(fromBus, 1);
    const context = seen.get(id)!;
    expect(context.source).toBe('eventbridge');
    expect(context.trace).toMatchObject({ traceId: TRACE_ID, spanId: SPAN_ID, sampled: true });
    // No message attributes come through a rule: the envelope's headers carry
    // it (they are read before any AWSTraceHeader the queue may hold).
    expect(context.trace?.from).toBe('envelope');
    expect(context.record.messageAttributes.traceparent).toBeUndefined();
  });

  it('takes the active OpenTelemetry span when the producer gives none, and links the consumer span to it', async () => {
    const ambientTraceId = 'abcdef0123456789abcdef0123456789';
    otel.state.active = { traceId: ambientTraceId, spanId: '1111111111111111', traceFlags: 0 };
    const [ambient, explicit] = await enqueueEvents(db.pool, [
      orderEvent(),
      orderEvent({ trace: { traceparent: TRACEPARENT } }),
    ]);
    otel.state.active = undefined;
    expect(await storedHeaders(ambient!)).toEqual({
      traceparent: `00-${ambientTraceId}-1111111111111111-00`,
    });
    expect(await storedHeaders(explicit!)).toEqual({ traceparent: TRACEPARENT });

    await relayTo(queueRoute());
    const seen = await consume(direct, 2);
    expect(seen.get(ambient!)?.trace).toMatchObject({ traceId: ambientTraceId, sampled: false });
    expect(seen.get(explicit!)?.trace?.traceId).toBe(TRACE_ID);
    const links = otel.state.spans.map((s) => s.options.links?.map((l) => l.context.traceId));
    expect(otel.state.spans.map((s) => s.name)).toEqual(['process order.created', 'process order.created']);
    expect(links.flat().sort()).toEqual([ambientTraceId, TRACE_ID].sort());
  });

  it('refuses a bad traceparent naming the field, and writes none of the call', async () => {
    const error = await enqueueEvents(db.pool, [
      orderEvent({ trace: { traceparent: TRACEPARENT } }),
      orderEvent({ headers: { traceparent: `00-${TRACE_ID.toUpperCase()}-${SPAN_ID}-01` } }),
    ]).catch((e) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect(error.field).toBe('events[1].headers.traceparent');
    const zero = await enqueueEvent(
      db.pool,
      orderEvent({ trace: { traceparent: `00-${'0'.repeat(32)}-${SPAN_ID}-01` } }),
    ).catch((e) => e);
    expect(zero).toMatchObject({ name: 'ValidationError', field: 'events[0].trace.traceparent' });
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM outbox_events');
    expect(rows[0].n).toBe(0);
  });

  it('a message with only AWSTraceHeader (X-Ray): the handler sees it as W3C', async () => {
    const id = randomUUID();
    const envelope = {
      id,
      type: 'order.created',
      aggregateType: 'order',
      aggregateId: 'o-xray',
      occurredAt: new Date().toISOString(),
      payload: {},
      headers: {},
    };
    await aws.sqs.send(
      new SendMessageCommand({
        QueueUrl: direct.url,
        MessageBody: JSON.stringify(envelope),
        MessageSystemAttributes: { AWSTraceHeader: { DataType: 'String', StringValue: XRAY } },
      }),
    );
    const seen = await consume(direct, 1);
    expect(seen.get(id)?.record.attributes.AWSTraceHeader).toBe(XRAY);
    expect(seen.get(id)?.trace).toEqual({
      traceparent: TRACEPARENT,
      traceId: TRACE_ID,
      spanId: SPAN_ID,
      sampled: true,
      from: 'AWSTraceHeader',
    });
  });
});
