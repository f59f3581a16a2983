import { randomUUID } from 'node:crypto';
import {
  CreateEventBusCommand,
  EventBridgeClient,
  PutRuleCommand,
  PutTargetsCommand,
} from '@aws-sdk/client-eventbridge';
import { SQSClient } from '@aws-sdk/client-sqs';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { RouteConfig } from '../lib/publish/routes.js';
import type { RelayOptions } from '../lib/relay/options.js';
import { claimBatch } from '../lib/sql/claim-batch.js';
import { freePort } from '../scripts/local/free-port.js';
import { awsClients, createQueue, drainQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { eventRows, insertEvents } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();
let standard: { url: string; arn: string };
let fifo: { url: string; arn: string };
let busQueue: { url: string; arn: string };
let bus: string;

beforeAll(async () => {
  standard = await createQueue(aws.sqs, uniqueName('relay-std'));
  fifo = await createQueue(aws.sqs, `${uniqueName('relay-fifo')}.fifo`);
  busQueue = await createQueue(aws.sqs, uniqueName('relay-bus-target'));
  bus = uniqueName('relay-bus');
  await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
  const rule = uniqueName('relay-rule');
  await aws.eventBridge.send(
    new PutRuleCommand({
      Name: rule,
      EventBusName: bus,
      EventPattern: JSON.stringify({ source: ['outbox'] }),
    }),
  );
  await aws.eventBridge.send(
    new PutTargetsCommand({ Rule: rule, EventBusName: bus, Targets: [{ Id: 'q', Arn: busQueue.arn }] }),
  );
});
beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

const relayFor = (
  routes: RouteConfig[],
  options: RelayOptions = {},
  clients = aws,
  extra: Parameters<typeof emulatorRelay>[4] = {},
) => emulatorRelay(db.pool, clients, routes, options, extra);
const drain = drainUntilIdle;

describe('relay → SQS and EventBridge', () => {
  it('publishes to a standard queue, a FIFO queue and a bus, with the envelope and attributes', async () => {
    const { relay } = relayFor([
      {
        match: 'order.*',
        targets: [
          { type: 'sqs', queueUrl: standard.url },
          { type: 'eventbridge', busName: bus },
        ],
      },
      { match: 'payment.*', targets: [{ type: 'sqs', queueUrl: fifo.url }] },
    ]);
    const [orderId] = await insertEvents(db.pool, 1, () => ({
      aggregateId: 'o-1',
      payload: { total: 42 },
      headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    }));
    const paymentIds = await insertEvents(db.pool, 3, (i) => ({
      aggregateType: 'payment',
      aggregateId: 'p-1',
      eventType: 'payment.captured',
      payload: { n: i },
    }));
    const summary = await drain(relay);
    expect(summary).toMatchObject({ published: 4, retried: 0, deadLettered: 0 });

    const [sqsMessage] = await receiveAll(aws.sqs, standard.url, 1);
    const envelope = JSON.parse(sqsMessage?.Body as string);
    expect(envelope).toEqual({
      id: orderId,
      type: 'order.created',
      aggregateType: 'order',
      aggregateId: 'o-1',
      occurredAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      payload: { total: 42 },
      headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    });
    expect(sqsMessage?.MessageAttributes?.eventId?.StringValue).toBe(orderId);
    expect(sqsMessage?.MessageAttributes?.eventType?.StringValue).toBe('order.created');
    expect(sqsMessage?.MessageAttributes?.aggregateId?.StringValue).toBe('o-1');

    const [busMessage] = await receiveAll(aws.sqs, busQueue.url, 1);
    const busEvent = JSON.parse(busMessage?.Body as string);
    expect(busEvent).toMatchObject({ source: 'outbox', 'detail-type': 'order.created', detail: envelope });

    const fifoMessages = await drainQueue(aws.sqs, fifo.url, 3);
    expect(fifoMessages.map((m) => JSON.parse(m.Body as string).id)).toEqual(paymentIds);
    expect(fifoMessages.map((m) => m.Attributes?.MessageGroupId)).toEqual([
      'payment:p-1',
      'payment:p-1',
      'payment:p-1',
    ]);
    expect(fifoMessages.map((m) => m.Attributes?.MessageDeduplicationId)).toEqual(paymentIds);

    const rows = await eventRows(db.pool);
    expect(rows.every((r) => r.processed_at !== null && r.locked_by === null && r.attempts === 1)).toBe(true);
  });

  it('dead-letters only the oversize event of a batch, with the reason, and publishes the rest', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('relay-small'));
    const { relay, metrics } = relayFor([
      { match: '*', targets: [{ type: 'sqs', queueUrl: queue.url, maxMessageBytes: 4096 }] },
    ]);
    const ids = await insertEvents(db.pool, 10, (i) => ({ payload: i === 4 ? 'x'.repeat(5000) : { i } }));
    const summary = await drain(relay);
    expect(summary).toMatchObject({ published: 9, deadLettered: 1, retried: 0 });
    const rows = await eventRows(db.pool);
    const dead = rows.filter((r) => r.dead_lettered_at !== null);
    expect(dead.map((r) => r.id)).toEqual([ids[4]]);
    expect(dead[0]?.last_error).toMatch(/message is \d+ bytes, over the queue's limit of 4096 bytes/);
    const received = await receiveAll(aws.sqs, queue.url, 9);
    expect(received.map((m) => JSON.parse(m.Body as string).id).sort()).toEqual(
      ids.filter((_, i) => i !== 4).sort(),
    );
    expect(metrics.records).toContainEqual({
      name: 'DeadLettered',
      unit: 'Count',
      value: 1,
      dimensions: { eventType: 'order.created' },
    });
    // The dead-letter view shows it with its reason.
    const view = await db.pool.query('SELECT id, last_error FROM outbox_dead_letters');
    expect(view.rows).toEqual([{ id: ids[4], last_error: dead[0]?.last_error }]);
  });

  it('an event with no route is dead-lettered at once; routed events flow', async () => {
    const { relay } = relayFor([{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: standard.url }] }]);
    await insertEvents(db.pool, 2, (i) => ({ eventType: i === 0 ? 'invoice.sent' : 'order.created' }));
    expect(await drain(relay)).toMatchObject({ published: 1, deadLettered: 1 });
    const rows = await eventRows(db.pool);
    expect(rows[0]?.last_error).toBe('no route for event type "invoice.sent"');
    await drainQueue(aws.sqs, standard.url, 1);
  });

  it('relay dies between publish and mark → published again after the lease expires; nothing lost', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('relay-crash'));
    const routes: RouteConfig[] = [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }];
    const ids = await insertEvents(db.pool, 5);
    // The first relay claims and publishes, then "dies": it never records the outcome.
    const { publisher } = relayFor(routes);
    const leaseMs = 3_000;
    const claimedAt = Date.now();
    const claimed = await claimBatch(db.pool, {
      limit: 100,
      leaseMs,
      leaseId: randomUUID(),
      maxAttempts: 5,
      ordered: false,
    });
    // While the lease holds, another relay finds nothing to do. (Asked before
    // the publish: on a loaded machine the publish may take a second or more.)
    const { relay } = relayFor(routes, { leaseMs: 1000 });
    expect(await drain(relay)).toMatchObject({ claimed: 0 });
    const outcomes = await publisher.publish(claimed.events);
    expect(outcomes.every((o) => o.ok)).toBe(true);

    await new Promise((r) => setTimeout(r, Math.max(0, claimedAt + leaseMs + 100 - Date.now())));
    expect(await drain(relay)).toMatchObject({ claimed: 5, published: 5 });

    const rows = await eventRows(db.pool);
    // The lost lease held a batch: not counted against its rows (each was then claimed alone).
    expect(rows.map((r) => [r.processed_at !== null, r.attempts])).toEqual(ids.map(() => [true, 1]));
    // At-least-once: each event arrived twice (the in-flight batch), none is missing.
    const received = await receiveAll(aws.sqs, queue.url, 10);
    const counts = new Map<string, number>();
    for (const m of received) {
      const id = JSON.parse(m.Body as string).id;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    expect([...counts.keys()].sort()).toEqual([...ids].sort());
    expect([...counts.values()]).toEqual([2, 2, 2, 2, 2]);
  });

  it('a message that keeps killing the relay ends in dead letters instead of looping', async () => {
    const [id] = await insertEvents(db.pool, 1);
    // Each claim is one attempt whose relay dies before recording anything.
    const claimAfterCrash = async () => {
      await db.pool.query("UPDATE outbox_events SET locked_until = now() - interval '1 second'");
      return claimBatch(db.pool, {
        limit: 10,
        leaseMs: 60_000,
        leaseId: randomUUID(),
        maxAttempts: 3,
        ordered: false,
      });
    };
    for (let i = 0; i < 3; i++) {
      expect((await claimAfterCrash()).events.map((e) => e.id)).toEqual([id]);
    }
    const claim = await claimAfterCrash();
    expect(claim.events).toEqual([]);
    expect(claim.exhausted.map((e) => e.id)).toEqual([id]);
    const [row] = await eventRows(db.pool);
    expect(row?.dead_lettered_at).not.toBeNull();
    expect(row?.last_error).toMatch(/lease expired without an outcome after 3 attempts/);
  });

  it('emulator unreachable → no attempt spent, the target is backed off, calls stay few; drained once back', async () => {
    const deadPort = await freePort();
    let calls = 0;
    const unreachable = {
      ...aws,
      sqs: new SQSClient({
        endpoint: `http://127.0.0.1:${deadPort}`,
        region: 'us-east-1',
        credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
        maxAttempts: 1,
      }),
      eventBridge: new EventBridgeClient({
        endpoint: `http://127.0.0.1:${deadPort}`,
        region: 'us-east-1',
        maxAttempts: 1,
      }),
    };
    const queue = await createQueue(aws.sqs, uniqueName('relay-outage'));
    const routes: RouteConfig[] = [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }];
    const ids = await insertEvents(db.pool, 20);
    const down = relayFor(
      routes,
      { maxAttempts: 2, batchSize: 20, workers: 1, backoff: { baseMs: 400, factor: 2, maxMs: 10_000 } },
      unreachable,
      { circuit: { failureThreshold: 3, probeBaseMs: 60_000 }, onCall: () => calls++ },
    );

    for (let round = 1; round <= 4; round++) {
      // Let the hold pass, then try again against the dead endpoint.
      await db.pool.query('UPDATE outbox_events SET retry_after = now()');
      const summary = await drain(down.relay);
      expect(summary).toMatchObject({ claimed: 20, retried: 20, held: 20, deadLettered: 0, published: 0 });
      const rows = await eventRows(db.pool);
      // More rounds than maxAttempts, yet no attempt is spent and nothing is dead.
      expect(new Set(rows.map((r) => r.attempts))).toEqual(new Set([0]));
      expect(rows.every((r) => r.dead_lettered_at === null && r.locked_by === null)).toBe(true);
    }
    // 2 calls of 10 per round until 3 failed in a row opened the circuit (the
    // second round's 2 calls start together, so 3 or 4); then none at all.
    expect(calls).toBeGreaterThanOrEqual(3);
    expect(calls).toBeLessThanOrEqual(4);
    const rows = await eventRows(db.pool);
    expect(rows.filter((r) => /SQS network error/.test(r.last_error ?? '')).length).toBeGreaterThan(0);
    expect(
      rows.filter((r) => /TargetUnavailable|backed off/.test(r.last_error ?? '')).length,
    ).toBeGreaterThan(0);
    // The log: a summary per run, not a line per waiting event per claim
    // (those are debug lines); the first names the network error.
    const summaries = down.log.lines.filter((l) =>
      l.message.startsWith('events wait for unavailable targets'),
    );
    expect(summaries.map((l) => l.level)).toEqual(['warn', 'warn', 'warn', 'warn']);
    expect(
      summaries.map(
        (l) => (l.extra.targets as Record<string, { retries: number }>)[`sqs:${queue.url}`]?.retries,
      ),
    ).toEqual([20, 20, 20, 20]);
    expect(JSON.stringify(summaries[0]?.extra)).toMatch(/SQS network error/);
    expect(down.log.lines.filter((l) => l.level !== 'debug' && l.extra.event_id !== undefined)).toEqual([]);
    const line = down.log.lines.find((l) => l.level === 'debug' && l.extra.event_id === ids[0])?.extra;
    expect(line).toMatchObject({ event_id: ids[0], event_type: 'order.created', attempt: 1 });
    expect(line).not.toHaveProperty('aggregate_id'); // only with logAggregateId

    // The emulator is back: everything drains.
    await db.pool.query('UPDATE outbox_events SET retry_after = now()');
    const up = relayFor(routes, { maxAttempts: 2 });
    expect(await drain(up.relay)).toMatchObject({ published: 20, deadLettered: 0 });
    const received = await receiveAll(aws.sqs, queue.url, 20);
    expect(new Set(received.map((m) => JSON.parse(m.Body as string).id))).toEqual(new Set(ids));
  });

  it('a failure of the environment dead-letters an event only past the maximum pending age', async () => {
    const routes: RouteConfig[] = [
      {
        match: '*',
        targets: [{ type: 'sqs', queueUrl: `${aws.endpoint}/000000000000/${uniqueName('missing')}` }],
      },
    ];
    await insertEvents(db.pool, 1);
    const options = { maxAttempts: 1, maxPendingAgeMs: 3_600_000, backoff: { baseMs: 60_000 } };
    const { relay } = relayFor(routes, options);
    for (let i = 0; i < 3; i++) {
      await db.pool.query('UPDATE outbox_events SET retry_after = now()');
      expect(await drain(relay)).toMatchObject({ retried: 1, held: 1, deadLettered: 0 });
    }
    // An hour and a bit later, still failing: now it is a dead letter, and says why.
    const later = relayFor(routes, options, aws, { now: () => Date.now() + 3_700_000 });
    await db.pool.query('UPDATE outbox_events SET retry_after = now()');
    expect(await drain(later.relay)).toMatchObject({ retried: 0, deadLettered: 1 });
    const [row] = await eventRows(db.pool);
    expect(row?.last_error).toMatch(
      /^failing for reasons of the environment for longer than the maximum age \(3600000 ms\); last error: SQS config error/,
    );
  });

  it('misconfigured target (queue does not exist) → events stay pending, not dead-lettered; logs and metrics say why', async () => {
    const missing = `${aws.endpoint}/000000000000/${uniqueName('does-not-exist')}`;
    const { relay, log, metrics } = relayFor([{ match: '*', targets: [{ type: 'sqs', queueUrl: missing }] }]);
    await insertEvents(db.pool, 3);
    const summary = await drain(relay);
    expect(summary).toMatchObject({ claimed: 3, retried: 3, deadLettered: 0, published: 0 });
    const rows = await eventRows(db.pool);
    expect(rows.every((r) => r.processed_at === null && r.dead_lettered_at === null)).toBe(true);
    expect(rows.every((r) => r.retry_after !== null)).toBe(true);
    expect(rows[0]?.last_error).toMatch(/SQS config error: .*(NonExistentQueue|QueueDoesNotExist)/);
    const warn = log.lines.find((l) => l.level === 'warn');
    expect(warn?.message).toMatch(/^events wait for unavailable targets/);
    expect(JSON.stringify(warn?.extra.targets)).toMatch(
      /"retries":3,"codes":\{"(NonExistentQueue|QueueDoesNotExist|AWS\.SimpleQueueService\.NonExistentQueue)":3\}/,
    );
    expect(metrics.records).toContainEqual({
      name: 'Failed',
      unit: 'Count',
      value: 3,
      dimensions: { eventType: 'order.created' },
    });
    expect(metrics.records).toContainEqual({
      name: 'DeadLettered',
      unit: 'Count',
      value: 0,
      dimensions: undefined,
    });
  });

  it('multi-target event: a retry only re-sends to the target that failed', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('relay-multi'));
    const missing = `${aws.endpoint}/000000000000/${uniqueName('missing-multi')}`;
    const broken = relayFor(
      [
        {
          match: '*',
          targets: [
            { type: 'sqs', queueUrl: queue.url },
            { type: 'sqs', queueUrl: missing },
          ],
        },
      ],
      { backoff: { baseMs: 5000, maxMs: 5000 } },
    );
    const [id] = await insertEvents(db.pool, 1);
    expect(await drain(broken.relay)).toMatchObject({ retried: 1 });
    expect((await eventRows(db.pool))[0]?.delivered_targets).toEqual([`sqs:${queue.url}`]);
    // The second queue now exists (route fixed to a real one); only it receives the retry.
    const second = await createQueue(aws.sqs, uniqueName('relay-multi-2'));
    await db.pool.query(`UPDATE outbox_events SET retry_after = now()`);
    const fixed = relayFor([
      {
        match: '*',
        targets: [
          { type: 'sqs', queueUrl: queue.url },
          { type: 'sqs', queueUrl: second.url },
        ],
      },
    ]);
    expect(await drain(fixed.relay)).toMatchObject({ published: 1 });
    expect(
      (await receiveAll(aws.sqs, queue.url, 2, 2500)).map((m) => JSON.parse(m.Body as string).id),
    ).toEqual([id]);
    expect((await receiveAll(aws.sqs, second.url, 1)).map((m) => JSON.parse(m.Body as string).id)).toEqual([
      id,
    ]);
  });

  it('ordered mode: a backing-off event holds back its aggregate only; with deadLetterPolicy skip a dead letter stops holding it', async () => {
    const routes: RouteConfig[] = [{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: fifo.url }] }];
    const { relay } = relayFor(routes, {
      ordering: 'aggregate',
      deadLetterPolicy: 'skip',
      backoff: { baseMs: 60_000, maxMs: 60_000 },
    });
    // a: [unroutable, ok, ok]; b: [ok, ok]
    const ids = await insertEvents(db.pool, 5, (i) => ({
      aggregateId: i < 3 ? 'a' : 'b',
      eventType: i === 0 ? 'invoice.unroutable' : 'order.updated',
      payload: { i },
    }));
    // First make a's head retryable-failing instead: point it at a missing queue.
    const missing = `${aws.endpoint}/000000000000/${uniqueName('missing')}.fifo`;
    const blocked = relayFor(
      [{ match: 'invoice.*', targets: [{ type: 'sqs', queueUrl: missing }] }, ...routes],
      { ordering: 'aggregate', backoff: { baseMs: 60_000, maxMs: 60_000 } },
    );
    expect(await drain(blocked.relay)).toMatchObject({ published: 2, retried: 1 });
    let rows = await eventRows(db.pool);
    // a's head backs off; a's later events wait; b flowed.
    expect(rows.map((r) => r.processed_at !== null)).toEqual([false, false, false, true, true]);
    expect(rows[0]?.retry_after).not.toBeNull();

    // Now a's head has no route at all: dead letter, and a's successors flow, in order.
    await db.pool.query('UPDATE outbox_events SET retry_after = now() WHERE id = $1', [ids[0]]);
    expect(await drain(relay)).toMatchObject({ deadLettered: 1, published: 2 });
    rows = await eventRows(db.pool);
    expect(rows[0]?.dead_lettered_at).not.toBeNull();
    expect(rows.slice(1).every((r) => r.processed_at !== null)).toBe(true);
    const received = await drainQueue(aws.sqs, fifo.url, 4);
    const byGroup = (group: string) =>
      received
        .filter((m) => m.Attributes?.MessageGroupId === group)
        .map((m) => JSON.parse(m.Body as string).payload.i);
    expect(byGroup('order:a')).toEqual([1, 2]);
    expect(byGroup('order:b')).toEqual([3, 4]);
  });
});
