import {
  CreateEventBusCommand,
  EventBridgeClient,
  PutRuleCommand,
  PutTargetsCommand,
} from '@aws-sdk/client-eventbridge';
import { GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../lib/errors.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import { TargetProxy } from '../scripts/chaos/target-proxy.js';
import { startLocalAws } from '../scripts/local/aws-emulator.js';
import { awsClients, createQueue, drainQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { eventRows, insertEvents } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

// The relay against a target that stops answering, refuses connections or
// comes back, through a TCP proxy in front of the emulator; and rows or
// routes that used to take their neighbours down with them.

const db = useTestDatabase();
const aws = awsClients();
let proxy: TargetProxy;
const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };

beforeAll(async () => {
  proxy = await TargetProxy.start(aws.endpoint);
});
afterAll(async () => {
  await proxy.stop();
});
beforeEach(async () => {
  proxy.setMode('pass');
  await db.pool.query('TRUNCATE outbox_events');
});

/** Clients whose calls go through the proxy; no SDK retries, no SDK timeouts. */
function proxiedClients() {
  const config = { endpoint: proxy.endpoint, region: 'us-east-1', credentials, maxAttempts: 1 };
  return { sqs: new SQSClient(config), eventBridge: new EventBridgeClient(config) };
}

/** A bus with a rule sending events of `source` to a new queue. */
async function busToQueue(bus: string, source: string) {
  const queue = await createQueue(aws.sqs, uniqueName('bus-target'));
  const rule = uniqueName('rule');
  await aws.eventBridge.send(
    new PutRuleCommand({ Name: rule, EventBusName: bus, EventPattern: JSON.stringify({ source: [source] }) }),
  );
  await aws.eventBridge.send(
    new PutTargetsCommand({ Rule: rule, EventBusName: bus, Targets: [{ Id: 'q', Arn: queue.arn }] }),
  );
  return queue;
}

describe('relay under faults', () => {
  it('a target that never answers: the run returns within its budget, no row stays leased, no attempt is spent', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('hung'));
    const routes: RouteConfig[] = [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }];
    await insertEvents(db.pool, 30);
    proxy.setMode('blackhole');
    // The SDK itself has no request timeout here: only the relay's deadline ends the calls.
    const { relay } = emulatorRelay(db.pool, proxiedClients(), routes, {
      batchSize: 30,
      workers: 1,
      safetyMarginMs: 1_000,
      backoff: { baseMs: 60_000 },
    });
    const budgetMs = 3_000;
    const end = Date.now() + budgetMs;
    const started = Date.now();
    const summary = await relay.run({ remainingMs: () => end - Date.now() });
    const tookMs = Date.now() - started;

    expect(tookMs).toBeLessThan(budgetMs);
    expect(summary).toMatchObject({ claimed: 30, published: 0, held: 30, deadLettered: 0 });
    const rows = await eventRows(db.pool);
    expect(rows.every((r) => r.locked_by === null && r.locked_until === null)).toBe(true);
    expect(
      rows.every((r) => r.attempts === 0 && r.processed_at === null && r.dead_lettered_at === null),
    ).toBe(true);
    expect(rows.every((r) => /DeadlineExceeded/.test(r.last_error ?? ''))).toBe(true);
    expect(proxy.counts.blackholed).toBeGreaterThan(0);

    // Answering again: everything goes out.
    proxy.setMode('pass');
    await db.pool.query('UPDATE outbox_events SET retry_after = NULL');
    const { relay: healthy } = emulatorRelay(db.pool, aws, routes);
    expect(await drainUntilIdle(healthy)).toMatchObject({ published: 30 });
  });

  it('the emulator paused (SIGSTOP) with a batch in flight: the run returns in budget, rows published or released', async () => {
    // An emulator of this test's own, so pausing it disturbs no other test file.
    const own = await startLocalAws({ emulator: 'moto' });
    if (own.pid === undefined) {
      await own.stop();
      return; // AWS_ENDPOINT_URL names an emulator this test did not start and must not pause
    }
    try {
      const config = { endpoint: own.endpoint, region: 'us-east-1', credentials, maxAttempts: 1 };
      const clients = { sqs: new SQSClient(config), eventBridge: new EventBridgeClient(config) };
      const queue = await createQueue(clients.sqs, uniqueName('paused'));
      const routes: RouteConfig[] = [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }];
      await insertEvents(db.pool, 200);
      let paused = false;
      const { relay } = emulatorRelay(
        db.pool,
        clients,
        routes,
        { batchSize: 50, workers: 2, safetyMarginMs: 1_000, backoff: { baseMs: 60_000 } },
        {
          onCall: () => {
            if (paused) return;
            paused = true;
            process.kill(own.pid as number, 'SIGSTOP');
          },
        },
      );
      const budgetMs = 4_000;
      const end = Date.now() + budgetMs;
      const summary = await relay.run({ remainingMs: () => end - Date.now(), skipStats: true });
      expect(Date.now()).toBeLessThan(end);
      expect(paused).toBe(true);
      expect(summary.held).toBeGreaterThan(0);
      const rows = await eventRows(db.pool);
      expect(rows.filter((r) => r.locked_by !== null)).toEqual([]);
      const unsent = rows.filter((r) => r.processed_at === null);
      expect(unsent.length).toBeGreaterThan(0);
      expect(unsent.every((r) => r.attempts === 0 && r.dead_lettered_at === null)).toBe(true);

      process.kill(own.pid, 'SIGCONT');
      await db.pool.query('UPDATE outbox_events SET retry_after = NULL');
      const { relay: after } = emulatorRelay(db.pool, clients, routes);
      await drainUntilIdle(after);
      expect((await eventRows(db.pool)).every((r) => r.processed_at !== null)).toBe(true);
      // At least once: the batch that hung may arrive twice once the emulator
      // resumes; every event must be there.
      const { Attributes } = await clients.sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: queue.url,
          AttributeNames: ['ApproximateNumberOfMessages'],
        }),
      );
      const received = await drainQueue(
        clients.sqs,
        queue.url,
        Number(Attributes?.ApproximateNumberOfMessages),
        60_000,
      );
      expect(new Set(received.map((m) => JSON.parse(m.Body as string).id)).size).toBe(200);
    } finally {
      if (own.pid !== undefined) process.kill(own.pid, 'SIGCONT');
      await own.stop();
    }
  });

  it('an outage of one target for a (compressed) hour: no dead letters, few calls, healthy targets flow, all out soon after', async () => {
    const bus = uniqueName('outage-bus');
    await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
    const busQueue = await busToQueue(bus, 'outbox');
    const healthyQueue = await createQueue(aws.sqs, uniqueName('healthy'));
    const routes: RouteConfig[] = [
      { match: 'payment.*', targets: [{ type: 'eventbridge', busName: bus }] },
      { match: 'order.*', targets: [{ type: 'sqs', queueUrl: healthyQueue.url }] },
    ];
    // SQS direct, EventBridge through the proxy: one target down, one up.
    const clients = { sqs: aws.sqs, eventBridge: proxiedClients().eventBridge };
    let calls = 0;
    let recovered = Number.POSITIVE_INFINITY;
    let firstCallAfterRecovery = Number.POSITIVE_INFINITY;
    const options = {
      batchSize: 50,
      workers: 2,
      maxAttempts: 3,
      // A minute of backoff or probe wait is 300 ms here: 5 s stand for 17 minutes.
      backoff: { baseMs: 3, factor: 2, maxMs: 300 },
      idleWaitMs: 20,
    };
    const circuit = { failureThreshold: 3, probeBaseMs: 20, probeMaxMs: 300 };
    const { relay } = emulatorRelay(db.pool, clients, routes, options, {
      circuit,
      onCall: () => {
        calls++;
        const now = Date.now();
        if (now >= recovered) firstCallAfterRecovery = Math.min(firstCallAfterRecovery, now);
      },
    });

    proxy.setMode('refuse');
    const payments = await insertEvents(db.pool, 200, (i) => ({
      eventType: 'payment.taken',
      aggregateId: `p-${i}`,
    }));
    const orders = await insertEvents(db.pool, 100, (i) => ({ aggregateId: `o-${i}` }));
    const outageMs = 5_000;
    const outageEnd = Date.now() + outageMs;
    const during = await relay.run({ remainingMs: () => outageEnd - Date.now(), skipStats: true });

    expect(during.deadLettered).toBe(0);
    expect(during.published).toBe(100); // the healthy target's events all went out
    const rows = await eventRows(db.pool);
    const waiting = rows.filter((r) => r.processed_at === null);
    expect(waiting).toHaveLength(200);
    expect(waiting.every((r) => r.attempts === 0 && r.dead_lettered_at === null)).toBe(true);
    // Bounded: the first failures, then one probe per (growing) interval,
    // against hundreds of claims of the waiting events.
    const failingCalls = proxy.counts.refused;
    expect(failingCalls).toBeGreaterThan(3);
    expect(failingCalls).toBeLessThanOrEqual(3 + 2 * Math.ceil(outageMs / 150));
    expect(calls - failingCalls).toBeLessThanOrEqual(20); // the healthy queue: 100 events, 10 per call

    // Back: the waiting events go out as soon as a probe gets through.
    proxy.setMode('pass');
    recovered = Date.now();
    const afterEnd = Date.now() + 20_000;
    let published = 0;
    while (published < 200 && Date.now() < afterEnd) {
      const summary = await relay.run({
        remainingMs: () => afterEnd - Date.now(),
        stopWhenIdle: true,
        skipStats: true,
      });
      published += summary.published;
      if (published < 200) await new Promise((r) => setTimeout(r, 50));
    }
    expect(published).toBe(200);
    // The first call after recovery is the probe: it went out within about one
    // probe interval (300 ms), not after the events' own backoff.
    expect(firstCallAfterRecovery - recovered).toBeLessThan(1_500);
    const received = await drainQueue(aws.sqs, busQueue.url, 200, 60_000);
    expect(new Set(received.map((m) => JSON.parse(m.Body as string).detail.id))).toEqual(new Set(payments));
    const receivedOrders = await drainQueue(aws.sqs, healthyQueue.url, 100, 60_000);
    expect(new Set(receivedOrders.map((m) => JSON.parse(m.Body as string).id))).toEqual(new Set(orders));
  });

  it('a database connection dropped under the claim: the run carries on with a new one', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('db-drop'));
    const routes: RouteConfig[] = [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }];
    await insertEvents(db.pool, 20);
    // The first statement the relay sends runs on a connection the server has
    // just terminated; every later one goes through the pool.
    const victim = new pg.Client({ connectionString: db.url });
    victim.on('error', () => {});
    await victim.connect();
    const { rows } = await victim.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    await db.pool.query('SELECT pg_terminate_backend($1)', [rows[0]?.pid]);
    let first = true;
    const dropping = {
      query: ((text: string, values?: unknown[]) => {
        if (!first) return db.pool.query(text, values);
        first = false;
        return victim.query(text, values);
      }) as pg.Pool['query'],
    };
    const { relay, log } = emulatorRelay(dropping as pg.Pool, aws, routes, { workers: 1 });
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 20 });
    expect(first).toBe(false);
    expect(log.lines.find((l) => l.message.startsWith('database connection lost'))).toBeDefined();
    await victim.end().catch(() => {});
  });

  it('a row that cannot become a message is dead-lettered alone, with the reason', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('bad-row'));
    const routes: RouteConfig[] = [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }];
    // A table from before the headers CHECK (or a write that bypassed it).
    await db.pool.query(
      'ALTER TABLE outbox_events DROP CONSTRAINT IF EXISTS outbox_events_headers_object_of_strings',
    );
    const good = await insertEvents(db.pool, 4);
    const {
      rows: [bad],
    } = await db.pool.query<{ id: string }>(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, headers)
       VALUES (gen_random_uuid(), 'order', 'bad', 'order.created', '{}', 'null') RETURNING id`,
    );
    const { relay } = emulatorRelay(db.pool, aws, routes);
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 4, deadLettered: 1, retried: 0 });
    const rows = await eventRows(db.pool);
    const badRow = rows.find((r) => r.id === bad?.id);
    expect(badRow?.dead_lettered_at).not.toBeNull();
    expect(badRow?.attempts).toBe(1);
    expect(badRow?.last_error).toMatch(/headers must be a JSON object of strings/);
    const received = await receiveAll(aws.sqs, queue.url, 4);
    expect(new Set(received.map((m) => JSON.parse(m.Body as string).id))).toEqual(new Set(good));
  });

  it('publishes the payload exactly as committed: big integers and decimals unrounded', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('exact'));
    const routes: RouteConfig[] = [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }];
    await db.pool.query(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
       VALUES (gen_random_uuid(), 'order', '1', 'order.created',
               '{"big":12345678901234567890,"price":10.10,"tiny":1e-30,"text":"ä\\u00e9 : , x"}')`,
    );
    const { relay } = emulatorRelay(db.pool, aws, routes);
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 1 });
    const [message] = await receiveAll(aws.sqs, queue.url, 1);
    const body = message?.Body as string;
    expect(body).toContain('"big":12345678901234567890');
    expect(body).toContain('"price":10.10');
    expect(body).toContain('"tiny":0.000000000000000000000000000001');
    expect(JSON.parse(body).payload.text).toBe('äé : , x');
  });

  it('two routes to one bus with different sources publish with their own source', async () => {
    const bus = uniqueName('sources-bus');
    await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
    const ordersQueue = await busToQueue(bus, 'shop.orders');
    const paymentsQueue = await busToQueue(bus, 'shop.payments');
    const routes: RouteConfig[] = [
      { match: 'order.*', targets: [{ type: 'eventbridge', busName: bus, source: 'shop.orders' }] },
      { match: 'payment.*', targets: [{ type: 'eventbridge', busName: bus, source: 'shop.payments' }] },
    ];
    const [order] = await insertEvents(db.pool, 1);
    const [payment] = await insertEvents(db.pool, 1, () => ({ eventType: 'payment.taken' }));
    const { relay } = emulatorRelay(db.pool, aws, routes);
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 2 });
    const [o] = await receiveAll(aws.sqs, ordersQueue.url, 1);
    const [p] = await receiveAll(aws.sqs, paymentsQueue.url, 1);
    expect(JSON.parse(o?.Body as string)).toMatchObject({ source: 'shop.orders', detail: { id: order } });
    expect(JSON.parse(p?.Body as string)).toMatchObject({ source: 'shop.payments', detail: { id: payment } });
  });

  it('refuses one queue named twice with different settings, naming both places', () => {
    const build = () =>
      createAwsPublisher({
        routes: [
          { match: 'a.*', targets: [{ type: 'sqs', queueUrl: 'https://sqs.example/1/q' }] },
          {
            match: 'b.*',
            targets: [{ type: 'sqs', queueUrl: 'https://sqs.example/1/q', maxMessageBytes: 4096 }],
          },
        ],
        sqs: aws.sqs,
        eventBridge: aws.eventBridge,
        source: 'outbox',
        concurrency: 1,
      });
    expect(build).toThrow(ConfigError);
    expect(build).toThrow(
      /routes\[1\]\.targets\[0\] and routes\[0\]\.targets\[0\] name the same destination/,
    );
  });
});
