// README.md, "What it does", promises about the relay that no other test
// holds it to:
// - "publish with **no transaction open**": while the AWS calls of a batch
//   are in flight, the relay's sessions hold no transaction and no row lock;
// - "record all outcomes in one set-based statement that only the lease
//   holder can apply", with published rows kept (the default; the deleting
//   mode has its own test in published-rows.test.ts);
// - "a circuit breaker probes it with one small call at growing intervals";
// - "`SendMessageBatch` ... with 10 entries and the byte limits per call,
//   several calls in flight".
// Everything runs against the real database and the emulator; the only
// wrapper is an observer around the real AWS publisher or SQS client.
import { randomUUID } from 'node:crypto';
import { SQSClient } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createAwsPublisher } from '../lib/publish/router.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import type { Publisher } from '../lib/publish/types.js';
import { Relay } from '../lib/relay/relay.js';
import { awsClients, createQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { eventRows, insertEvents } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();
const RELAY_APP = 'readme-promises-relay';
let queue: { url: string; arn: string };
let routes: RouteConfig[];
let relayPool: pg.Pool;

beforeAll(async () => {
  queue = await createQueue(aws.sqs, uniqueName('readme-promises'));
  routes = [{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: queue.url }] }];
  // The relay's own pool, named, so that its sessions can be told apart.
  relayPool = new pg.Pool({ connectionString: db.url, max: 4, application_name: RELAY_APP });
});
afterAll(async () => {
  await relayPool?.end();
});
beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

/** A real SQS client of the emulator that tries each call once (a middleware is added to it). */
const singleTrySqs = () =>
  new SQSClient({
    endpoint: aws.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    maxAttempts: 1,
  });

/** A relay on `relayPool` publishing through `publisher`: one worker, batches of 10. */
function relayWith(publisher: Publisher) {
  return new Relay({
    db: relayPool,
    publisher,
    options: { batchSize: 10, workers: 1, safetyMarginMs: 0, idleWaitMs: 20 },
    random: () => 0.5,
  });
}

const realPublisher = () =>
  createAwsPublisher({ routes, sqs: aws.sqs, eventBridge: aws.eventBridge, concurrency: 4 });

/**
 * What another session sees: the relay's sessions idle inside a transaction,
 * and whether `ids` can be locked at once (FOR UPDATE NOWAIT fails on a row
 * another transaction holds).
 */
async function look(
  ids: string[],
): Promise<{ idleInTransaction: number; lockable: boolean; error?: string }> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
     WHERE datname = current_database() AND application_name = $1 AND state LIKE 'idle in transaction%'`,
    [RELAY_APP],
  );
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL lock_timeout = '100ms'`);
    await client.query('SELECT id FROM outbox_events WHERE id = ANY($1::uuid[]) FOR UPDATE NOWAIT', [ids]);
    return { idleInTransaction: rows[0]?.n ?? -1, lockable: true };
  } catch (error) {
    return { idleInTransaction: rows[0]?.n ?? -1, lockable: false, error: String(error) };
  } finally {
    await client.query('ROLLBACK').catch(() => {});
    client.release();
  }
}

describe('README: publish with no transaction open', () => {
  it('while each batch is being sent, no relay session is in a transaction and its rows are not locked', async () => {
    const ids = await insertEvents(db.pool, 25);

    // The check sees what it looks for: a transaction of the relay's pool
    // holding a row lock is found, both ways.
    const held = await relayPool.connect();
    try {
      await held.query('BEGIN');
      await held.query('SELECT id FROM outbox_events WHERE id = $1 FOR UPDATE', [ids[0]]);
      expect(await look([ids[0] as string])).toMatchObject({ idleInTransaction: 1, lockable: false });
    } finally {
      await held.query('ROLLBACK');
      held.release();
    }

    const publisher = realPublisher();
    const looks: Array<{ when: string; batch: number } & Awaited<ReturnType<typeof look>>> = [];
    let batch = 0;
    const watched: Publisher = {
      async publish(events, context) {
        const mine = events.map((e) => e.id);
        batch++;
        looks.push({ when: 'before the calls', batch, ...(await look(mine)) });
        const outcomes = await publisher.publish(events, context);
        looks.push({ when: 'after the calls', batch, ...(await look(mine)) });
        return outcomes;
      },
    };
    const summary = await relayWith(watched).run({ remainingMs: () => 60_000, stopWhenIdle: true });
    expect(summary).toMatchObject({ claimed: 25, published: 25, deadLettered: 0 });
    expect(batch).toBe(3);
    expect(looks.filter((l) => l.idleInTransaction !== 0 || !l.lockable)).toEqual([]);
    const received = await receiveAll(aws.sqs, queue.url, 25);
    expect(new Set(received.map((m) => JSON.parse(m.Body as string).id))).toEqual(new Set(ids));
  });
});

describe('README: outcomes only the lease holder can apply (published rows kept, the default)', () => {
  /**
   * A publisher that, while the batch is in flight, hands `steal(events)`'s
   * rows to another relay: as if this relay's lease had run out and another
   * had claimed them.
   */
  function stealing(steal: (ids: string[]) => string[], other: string): Publisher {
    const publisher = realPublisher();
    return {
      async publish(events, context) {
        const taken = steal(events.map((e) => e.id));
        await db.pool.query(
          `UPDATE outbox_events SET locked_by = $2, locked_until = now() + interval '10 minutes'
           WHERE id = ANY($1::uuid[])`,
          [taken, other],
        );
        return publisher.publish(events, context);
      },
    };
  }

  const untouched = (other: string) => ({
    locked_by: other,
    processed_at: null,
    dead_lettered_at: null,
    last_error: null,
    retry_after: null,
  });

  it('every event published: the row another relay took is left to it', async () => {
    const ids = await insertEvents(db.pool, 5);
    const other = randomUUID();
    const stolen = ids[2] as string;
    const relay = relayWith(stealing(() => [stolen], other));
    const summary = await relay.run({ remainingMs: () => 60_000, stopWhenIdle: true });
    expect(summary).toMatchObject({ claimed: 5, leaseLost: 1 });
    const rows = new Map((await eventRows(db.pool)).map((r) => [r.id, r]));
    expect(rows.get(stolen)).toMatchObject(untouched(other));
    for (const id of ids.filter((id) => id !== stolen)) {
      expect(rows.get(id)?.processed_at, id).toBeInstanceOf(Date);
      expect(rows.get(id)?.locked_by, id).toBeNull();
    }
    await receiveAll(aws.sqs, queue.url, 5);
  });

  it('a mix of outcomes (published, dead-lettered): neither is applied to rows another relay took', async () => {
    // The second and fourth events have no route: their outcome is a dead letter.
    const ids = await insertEvents(db.pool, 5, (i) => ({
      eventType: i === 1 || i === 3 ? 'invoice.sent' : 'order.created',
    }));
    const [, deadMine, , deadStolen, publishedStolen] = ids as [string, string, string, string, string];
    const other = randomUUID();
    const relay = relayWith(stealing(() => [deadStolen, publishedStolen], other));
    const summary = await relay.run({ remainingMs: () => 60_000, stopWhenIdle: true });
    expect(summary).toMatchObject({ claimed: 5, leaseLost: 2 });
    const rows = new Map((await eventRows(db.pool)).map((r) => [r.id, r]));
    expect(rows.get(deadStolen)).toMatchObject(untouched(other));
    expect(rows.get(publishedStolen)).toMatchObject(untouched(other));
    expect(rows.get(deadMine)?.dead_lettered_at).toBeInstanceOf(Date);
    expect(rows.get(deadMine)?.last_error).toBe('no route for event type "invoice.sent"');
    for (const id of [ids[0], ids[2]] as string[]) {
      expect(rows.get(id)?.processed_at, id).toBeInstanceOf(Date);
    }
    await receiveAll(aws.sqs, queue.url, 3);
  });
});

describe('README: a failing target is probed with one small call', () => {
  it('once the circuit is open, each call to the failing target carries one event; a healthy target gets every event', async () => {
    const healthy = await createQueue(aws.sqs, uniqueName('readme-probe-healthy'));
    // A queue that does not exist: every call fails (the environment's fault).
    const missing = `${queue.url.replace(/\/[^/]+$/, '')}/${uniqueName('readme-probe-missing')}`;
    // The real client, with a middleware that notes each SendMessageBatch's size.
    const entries: Array<{ queue: string; count: number }> = [];
    const sqs = singleTrySqs();
    sqs.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'SendMessageBatchCommand') {
          const input = args.input as { QueueUrl: string; Entries: unknown[] };
          entries.push({ queue: input.QueueUrl, count: input.Entries.length });
        }
        return next(args);
      },
      { step: 'initialize', name: 'countEntries' },
    );
    // The circuit's clock, moved on by hand: no waiting for the probes.
    let clock = Date.now();
    const { relay } = emulatorRelay(
      db.pool,
      { sqs, eventBridge: aws.eventBridge },
      [
        {
          match: '*',
          targets: [
            { type: 'sqs', queueUrl: missing },
            { type: 'sqs', queueUrl: healthy.url },
          ],
        },
      ],
      { batchSize: 30, workers: 1, maxAttempts: 2, backoff: { baseMs: 60_000 } },
      { circuit: { failureThreshold: 2, probeBaseMs: 1_000, probeMaxMs: 4_000, now: () => clock } },
    );
    const ids = await insertEvents(db.pool, 30);
    const toMissing = (from: number) => entries.slice(from).filter((e) => e.queue === missing);
    const round = async () => {
      const from = entries.length;
      await db.pool.query('UPDATE outbox_events SET retry_after = NULL WHERE processed_at IS NULL');
      await drainUntilIdle(relay);
      return toMissing(from);
    };

    // Round 1: three calls of 10 fail; the second opens the circuit.
    const first = await round();
    expect(first.length).toBeGreaterThanOrEqual(2);
    expect(Math.max(...first.map((e) => e.count))).toBe(10);
    // Before the probe's wait has passed: no call at all.
    expect(await round()).toEqual([]);
    // Each time the wait has passed: one call, of one event.
    for (let i = 0; i < 3; i++) {
      clock += 10_000;
      expect(await round()).toEqual([{ queue: missing, count: 1 }]);
      expect(await round()).toEqual([]);
    }

    const rows = await eventRows(db.pool);
    // No attempt spent and nothing dead for the missing queue, and the healthy
    // queue got every event, once each.
    expect(rows.every((r) => r.attempts === 0 && r.dead_lettered_at === null)).toBe(true);
    const received = await receiveAll(aws.sqs, healthy.url, 30);
    expect(received.map((m) => JSON.parse(m.Body as string).id).sort()).toEqual([...ids].sort());
  });
});

describe('README: batched publishing, several calls in flight', () => {
  it('SendMessageBatch with 10 entries and at most 1 MiB per call, several calls at once', async () => {
    const target = await createQueue(aws.sqs, uniqueName('readme-batches'));
    const calls: Array<{ entries: number; bytes: number }> = [];
    let inFlight = 0;
    let maxInFlight = 0;
    // The real client; its middleware notes each call and adds 300 ms of
    // network round trip, so that calls made together overlap on any machine.
    const sqs = singleTrySqs();
    sqs.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== 'SendMessageBatchCommand') return next(args);
        const { Entries } = args.input as { Entries: Array<{ MessageBody: string }> };
        calls.push({
          entries: Entries.length,
          bytes: Entries.reduce((sum, e) => sum + Buffer.byteLength(e.MessageBody), 0),
        });
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        try {
          await new Promise((resolve) => setTimeout(resolve, 300));
          return await next(args);
        } finally {
          inFlight--;
        }
      },
      { step: 'initialize', name: 'watchCalls' },
    );
    const { relay } = emulatorRelay(
      db.pool,
      { sqs, eventBridge: aws.eventBridge },
      [{ match: '*', targets: [{ type: 'sqs', queueUrl: target.url }] }],
      { batchSize: 40, workers: 1 },
    );

    // 40 small events in one claim: four calls of 10, made together.
    const small = await insertEvents(db.pool, 40);
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 40, deadLettered: 0 });
    expect(calls.map((c) => c.entries)).toEqual([10, 10, 10, 10]);
    expect(maxInFlight).toBeGreaterThanOrEqual(2);

    // 12 events of about 200 kB: 10 of them would be 2 MB, so the calls are
    // cut by bytes (1 MiB each at most), not by count.
    calls.length = 0;
    const large = await insertEvents(db.pool, 12, () => ({ payload: { blob: 'x'.repeat(200_000) } }));
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 12, deadLettered: 0 });
    expect(calls.every((c) => c.entries <= 10 && c.bytes <= 1024 * 1024)).toBe(true);
    expect(calls.length).toBeGreaterThanOrEqual(3);
    expect(calls.reduce((n, c) => n + c.entries, 0)).toBe(12);

    const received = await receiveAll(aws.sqs, target.url, 52, 20_000);
    expect(received.map((m) => JSON.parse(m.Body as string).id).sort()).toEqual([...small, ...large].sort());
  });
});
