// Scale out: relay slots bound how many relays run at once, and a relay that
// finds a backlog starts more of them. Against PostgreSQL and real queues of
// the emulator; the relays started here are real Relay runs in this process
// (the deployed stack starts them as Lambda invocations, test/deployed-stack).
import { GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadRelayConfig } from '../lib/config/relay-config.js';
import type { Queryable } from '../lib/db/queryable.js';
import { ConfigError } from '../lib/errors.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import { resolveRelayOptions } from '../lib/relay/options.js';
import { Relay, type RelaySummary } from '../lib/relay/relay.js';
import {
  acquireRelaySlot,
  PARKED_HOLDER,
  parkRelaySlots,
  readyBacklog,
  relaySlotState,
  releaseRelaySlot,
  renewRelaySlot,
} from '../lib/sql/relay-slots.js';
import { type LocalAws, startLocalAws } from '../scripts/local/aws-emulator.js';
import { FaultProxy } from '../scripts/local/fault-proxy.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger, insertEvents } from './support/events.js';
import { slotRelay as slotRelayTo } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, outbox_relay_slots');
});

const budget = (ms: number) => {
  const end = performance.now() + ms;
  return () => end - performance.now();
};

/** Whether a relay holds a slot (a closed slot is no relay). */
const relayRunning = async () => (await relaySlotState(db.pool, { maxRelays: 64 })).running > 0;

describe('relay slots', () => {
  it('at most maxRelays holders at once, however many ask together; an expired slot is taken over', async () => {
    // Ten relays ask at once, each on its own connection.
    const pools = Array.from({ length: 10 }, () => new pg.Pool({ connectionString: db.url, max: 1 }));
    try {
      const slots = await Promise.all(
        pools.map((pool) =>
          acquireRelaySlot(pool, {
            holder: crypto.randomUUID(),
            maxRelays: 3,
            holdMs: 60_000,
            aliveMs: 60_000,
          }),
        ),
      );
      expect(slots.filter((s) => s !== undefined).sort()).toEqual([0, 1, 2]);
      expect(await relaySlotState(db.pool, { maxRelays: 3 })).toMatchObject({ held: 3 });
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
    // A holder that died: its slot frees when its time is up.
    await db.pool.query(
      "UPDATE outbox_relay_slots SET held_until = now() - interval '1 second' WHERE slot = 1",
    );
    const take = () =>
      acquireRelaySlot(db.pool, { holder: crypto.randomUUID(), maxRelays: 3, holdMs: 1_000, aliveMs: 1_000 });
    expect(await take()).toBe(1);
    expect(await take()).toBeUndefined();
  });

  it('closed slots count as held for taking a slot, not as running; their holders lose them; they open when their time is up', async () => {
    const slot = async (holder: string) =>
      acquireRelaySlot(db.pool, { holder, maxRelays: 4, holdMs: 60_000, aliveMs: 60_000 });
    const holders = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
    for (const [i, h] of holders.entries()) expect(await slot(h)).toBe(i);
    // The relay in slot 1 keeps itself and one more (the lowest other: slot 0).
    // Only the holder of the slot closes slots.
    expect(
      await parkRelaySlots(db.pool, {
        slot: 1,
        holder: crypto.randomUUID(),
        keep: 1,
        maxRelays: 4,
        parkMs: 1_500,
      }),
    ).toEqual([]);
    const closed = await parkRelaySlots(db.pool, {
      slot: 1,
      holder: holders[1] as string,
      keep: 2,
      maxRelays: 4,
      parkMs: 1_500,
    });
    expect(closed).toEqual([2, 3]);
    expect(await relaySlotState(db.pool, { maxRelays: 4 })).toMatchObject({ held: 4, running: 2, lowest: 0 });
    // Slot 2's holder finds so at its next renewal.
    expect(await renewRelaySlot(db.pool, { slot: 2, holder: holders[2] as string, aliveMs: 60_000 })).toEqual(
      { renewed: false, closed: true },
    );
    expect(await renewRelaySlot(db.pool, { slot: 0, holder: holders[0] as string, aliveMs: 60_000 })).toEqual(
      { renewed: true, closed: false },
    );
    // Its release leaves the closed slot closed.
    await releaseRelaySlot(db.pool, 2, holders[2] as string);
    expect(await slot(crypto.randomUUID())).toBeUndefined();
    // With the running relays gone, closed slots are no relay running.
    await releaseRelaySlot(db.pool, 0, holders[0] as string);
    await releaseRelaySlot(db.pool, 1, holders[1] as string);
    expect(await relayRunning()).toBe(false);
    expect(await relaySlotState(db.pool, { maxRelays: 4 })).toMatchObject({
      held: 2,
      running: 0,
      lowest: null,
    });
    expect(await slot(crypto.randomUUID())).toBe(0);
    expect(await slot(crypto.randomUUID())).toBe(1);
    expect(await slot(crypto.randomUUID())).toBeUndefined();
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox_relay_slots WHERE holder = $1',
      [PARKED_HOLDER],
    );
    expect(rows[0].n).toBe(2);
    await new Promise((resolve) => setTimeout(resolve, 1_600));
    expect(await slot(crypto.randomUUID())).toBe(2);
    expect(await slot(crypto.randomUUID())).toBe(3);
  });

  it('a holder that stops renewing its slot loses it within aliveMs, though its budget runs on', async () => {
    const holder = crypto.randomUUID();
    // aliveMs well above the renewals' spacing: a query slowed by a loaded
    // machine does not let the slot lapse between two of them.
    const aliveMs = 1_500;
    const slot = await acquireRelaySlot(db.pool, { holder, maxRelays: 1, holdMs: 60_000, aliveMs });
    expect(slot).toBe(0);
    const other = () =>
      acquireRelaySlot(db.pool, { holder: crypto.randomUUID(), maxRelays: 1, holdMs: 60_000, aliveMs });
    // Renewed three times, 600 ms apart (1.8 s in all, past aliveMs): held all along.
    for (let i = 0; i < 3; i++) {
      await new Promise((r) => setTimeout(r, 600));
      expect((await renewRelaySlot(db.pool, { slot: 0, holder, aliveMs })).renewed).toBe(true);
      expect(await relayRunning()).toBe(true);
      expect(await other()).toBeUndefined();
    }
    // Then no more renewals (the relay was killed): free aliveMs later.
    await new Promise((r) => setTimeout(r, aliveMs + 100));
    expect(await relayRunning()).toBe(false);
    expect(await relaySlotState(db.pool, { maxRelays: 1 })).toMatchObject({ held: 0 });
    expect(await other()).toBe(0);
    // The old holder's renewal now says it lost the slot.
    expect((await renewRelaySlot(db.pool, { slot: 0, holder, aliveMs })).renewed).toBe(false);
  });

  it('a slot row without alive_until (a relay from before the liveness column) is held until its budget ends', async () => {
    await db.pool.query(
      "INSERT INTO outbox_relay_slots (slot, holder, held_until) VALUES (0, gen_random_uuid(), now() + interval '1 minute')",
    );
    expect(await relayRunning()).toBe(true);
    expect(
      await acquireRelaySlot(db.pool, {
        holder: crypto.randomUUID(),
        maxRelays: 1,
        holdMs: 1_000,
        aliveMs: 1_000,
      }),
    ).toBeUndefined();
  });

  it('a running relay renews its slot past slotAliveMs; one whose slot was taken stops claiming (busy)', async () => {
    const { url } = await createQueue(aws.sqs, uniqueName('slot-alive'));
    const { relay } = relayWith([{ match: '*', targets: [{ type: 'sqs', queueUrl: url }] }], {
      maxRelays: 1,
      slotAliveMs: 1_000,
      idleTailMs: null, // always on: it runs to its budget unless its slot goes
    });
    const running = relay.run({ remainingMs: budget(20_000), skipStats: true });
    // Held for 3.5 s, more than three times slotAliveMs: renewed.
    const until = performance.now() + 3_500;
    while (performance.now() < until) {
      await new Promise((r) => setTimeout(r, 100));
      expect(await relayRunning()).toBe(true);
    }
    await insertEvents(db.pool, 3);
    await new Promise((r) => setTimeout(r, 500));
    // Another relay takes the slot over (as if this one had missed its renewals).
    await db.pool.query('UPDATE outbox_relay_slots SET holder = gen_random_uuid() WHERE slot = 0');
    const started = performance.now();
    const summary = await running;
    expect(summary).toMatchObject({ stoppedBecause: 'busy', published: 3 });
    expect(performance.now() - started).toBeLessThan(2_000);
    // Its release left the other holder's row alone.
    expect(await relayRunning()).toBe(true);
    expect(await drainQueue(aws.sqs, url, 3)).toHaveLength(3);
  }, 30_000);

  it('readyBacklog counts ready events up to its bound', async () => {
    await insertEvents(db.pool, 30);
    expect(await readyBacklog(db.pool, { upTo: 25 })).toEqual({ ready: 25 });
    expect(await readyBacklog(db.pool, { upTo: 100 })).toMatchObject({ ready: 30 });
  });

  it('a run that finds every slot held claims nothing and says so', async () => {
    await insertEvents(db.pool, 5);
    for (const slot of [0, 1]) {
      await db.pool.query(
        "INSERT INTO outbox_relay_slots VALUES ($1, gen_random_uuid(), now() + interval '10 minutes')",
        [slot],
      );
    }
    const { relay } = relayWith([{ match: '*', targets: [{ type: 'sqs', queueUrl: 'http://unused/q' }] }], {
      maxRelays: 2,
    });
    const summary = await relay.run({ remainingMs: budget(30_000), skipStats: true });
    expect(summary).toMatchObject({ stoppedBecause: 'busy', claimed: 0 });
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM outbox_events WHERE attempts > 0');
    expect(rows[0].n).toBe(0);
  });

  it('options: maxRelays and the scale-out thresholds are checked', () => {
    expect(() => resolveRelayOptions({ maxRelays: 0 })).toThrow(ConfigError);
    expect(() => resolveRelayOptions({ maxRelays: 1.5 })).toThrow(/maxRelays/);
    expect(() => resolveRelayOptions({ scaleOutBacklog: 0 })).toThrow(/scaleOutBacklog/);
    expect(() => resolveRelayOptions({ slotAliveMs: 0 })).toThrow(/slotAliveMs/);
    // The defaults docs/configuration.md gives.
    expect(resolveRelayOptions({})).toMatchObject({
      maxRelays: null,
      scaleOutBacklog: 1_000,
      scaleOutAgeMs: 10_000,
      scaleOutParkMs: 300_000,
      slotAliveMs: 20_000,
    });
  });

  it('OUTBOX_MAX_RELAYS must fit OUTBOX_DB_CONNECTION_BUDGET, checked when the config loads', () => {
    const env = {
      OUTBOX_ROUTES: JSON.stringify([{ match: '*', targets: [{ type: 'sqs', queueUrl: 'https://q/1' }] }]),
      OUTBOX_MAX_RELAYS: '4',
      OUTBOX_WORKERS: '2',
    };
    // 4 × (2 + 1) = 12 connections.
    expect(loadRelayConfig({ ...env, OUTBOX_DB_CONNECTION_BUDGET: '12' }).relay.maxRelays).toBe(4);
    expect(() => loadRelayConfig({ ...env, OUTBOX_DB_CONNECTION_BUDGET: '11' })).toThrow(
      /4 relays × 3 database connections each .* = 12, more than OUTBOX_DB_CONNECTION_BUDGET \(11\)/,
    );
    // LISTEN holds one more each.
    expect(() =>
      loadRelayConfig({ ...env, OUTBOX_LISTEN: 'true', OUTBOX_DB_CONNECTION_BUDGET: '12' }),
    ).toThrow(expect.objectContaining({ variable: 'OUTBOX_MAX_RELAYS' }));
    expect(() => loadRelayConfig({ ...env, OUTBOX_MAX_RELAYS: '0' })).toThrow(
      expect.objectContaining({ variable: 'OUTBOX_MAX_RELAYS' }),
    );
  });
});

/**
 * A relay whose startRelays starts real relay runs in this process, each a
 * Relay of its own, as many as asked plus `extra` (to show that the slots,
 * not the caller, bound them). Records every run's summary.
 */
function relayWith(
  routes: RouteConfig[],
  options: ConstructorParameters<typeof Relay>[0]['options'],
  extra = 0,
  sqs: SQSClient = aws.sqs,
  runMs = 60_000,
) {
  const runs: Promise<RelaySummary>[] = [];
  const log = captureLogger();
  const make = (): Relay =>
    new Relay({
      db: db.pool,
      publisher: createAwsPublisher({
        routes,
        sqs,
        eventBridge: aws.eventBridge,
        source: 'outbox',
        concurrency: 4,
      }),
      options: { safetyMarginMs: 0, idleWaitMs: 20, idleTailMs: 300, ...options },
      logger: log.logger,
      startRelays: async (count) => {
        for (let i = 0; i < count + extra; i++) {
          // As the handler runs a relay started for a backlog: its tail from the start.
          runs.push(make().run({ remainingMs: budget(runMs), skipStats: true }));
        }
      },
    });
  return { relay: make(), runs, log };
}

/** Samples the slots held until stopped: the most held at once. */
function watchSlots() {
  let most = 0;
  let stopped = false;
  const done = (async () => {
    while (!stopped) {
      const { rows } = await db.pool.query(
        'SELECT count(*)::int AS n FROM outbox_relay_slots WHERE held_until > now() AND holder <> $1',
        [PARKED_HOLDER],
      );
      most = Math.max(most, rows[0].n);
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  return async () => {
    stopped = true;
    await done;
    return most;
  };
}

describe('scale out', () => {
  // The relays' calls go through a proxy that delays them, to MiniStack
  // (its queues answer hundreds of calls a second; moto's, a few dozen).
  let proxy: FaultProxy;
  let proxied: SQSClient;
  let ministack: LocalAws;
  let sqs: SQSClient;
  beforeAll(async () => {
    ministack = await startLocalAws({ emulator: 'ministack' });
    const config = {
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      maxAttempts: 2,
    };
    sqs = new SQSClient({ ...config, endpoint: ministack.endpoint });
    proxy = await FaultProxy.start(0);
    proxy.forwardTo(ministack.endpoint);
    proxied = new SQSClient({ ...config, endpoint: proxy.endpoint });
  }, 120_000);
  afterAll(async () => {
    proxied?.destroy();
    sqs?.destroy();
    await proxy?.stop();
    await ministack?.stop();
  });
  beforeEach(() => {
    proxy.delayMs = 0;
    proxy.oneAtATime = false;
  });

  /** A relay with one worker, maxRelays 2, through the proxy to `queueUrl`, starting relays with `startRelays`. */
  function oneWorkerRelay(queueUrl: string, startRelays: (count: number) => Promise<void>): Relay {
    return new Relay({
      db: db.pool,
      publisher: createAwsPublisher({
        routes: [{ match: '*', targets: [{ type: 'sqs', queueUrl }] }],
        sqs: proxied,
        eventBridge: aws.eventBridge,
        source: 'outbox',
      }),
      options: {
        safetyMarginMs: 0,
        idleWaitMs: 20,
        idleTailMs: 300,
        maxRelays: 2,
        workers: 1,
        batchSize: 10,
        scaleOutBacklog: 50,
      },
      logger: captureLogger().logger,
      startRelays,
    });
  }

  /** Messages in the queue (none received yet): each event once. */
  async function messagesIn(url: string): Promise<number> {
    const { Attributes } = await sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages'] }),
    );
    return Number(Attributes?.ApproximateNumberOfMessages);
  }

  it('a backlog starts relays while they raise the rate, doubling them up to maxRelays and no more; every event goes out once', async () => {
    // Every call 200 ms on the network, none waiting for another: each relay
    // adds its own rate, as relays do in AWS when they wait on round trips.
    proxy.delayMs = 200;
    const queue = await createQueue(sqs, uniqueName('scale-out'));
    const events = 1_200;
    await insertEvents(db.pool, events);
    const { relay, runs, log } = relayWith(
      [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
      { maxRelays: 4, workers: 1, batchSize: 10, scaleOutBacklog: 50 },
      1,
      proxied,
    );
    const most = watchSlots();
    const first = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
    const others = await Promise.all(runs);
    // Four at most, though each start asked for one more run than it needed.
    expect(await most()).toBe(4);
    expect(others.filter((s) => s.stoppedBecause === 'busy').length).toBeGreaterThanOrEqual(1);
    const started = log.lines.filter((l) => l.message === 'backlog: started more relays');
    expect(started[0]?.extra).toMatchObject({ started: 1, running: 1, max_relays: 4 });
    expect(log.lines.some((l) => l.message === 'more relays raised the rate')).toBe(true);
    expect(log.lines.some((l) => String(l.message).startsWith('more relays did not raise'))).toBe(false);
    expect(first.relaysStarted).toBeGreaterThanOrEqual(2);
    const total = [first, ...others].reduce((n, s) => n + s.published, 0);
    expect(total).toBe(events);
    expect(others.filter((s) => s.published > 0).length).toBeGreaterThanOrEqual(3);
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox_events WHERE processed_at IS NULL',
    );
    expect(rows[0].n).toBe(0);
    expect(await messagesIn(queue.url)).toBe(events);
    expect(await relaySlotState(db.pool, { maxRelays: 4 })).toMatchObject({ held: 0 });
  }, 120_000);

  it('relays that do not raise the rate leave, and their slots stay closed; every event goes out once', async () => {
    // One call at a time on a shared link: one relay already fills it.
    proxy.delayMs = 30;
    proxy.oneAtATime = true;
    const queue = await createQueue(sqs, uniqueName('scale-out-shared'));
    const events = 2_000;
    await insertEvents(db.pool, events);
    const { relay, runs, log } = relayWith(
      [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
      { maxRelays: 4, workers: 3, batchSize: 10, scaleOutBacklog: 50 },
      0,
      proxied,
    );
    const most = watchSlots();
    const first = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
    const others = await Promise.all(runs);
    // One relay started, measured, sent away; none after it.
    expect(first.relaysStarted).toBe(1);
    expect(others).toHaveLength(1);
    expect(others[0]?.stoppedBecause).toBe('busy');
    expect(await most()).toBe(2);
    const verdict = log.lines.findIndex((l) =>
      String(l.message).startsWith('more relays did not raise the rate'),
    );
    expect(log.lines[verdict]?.extra).toMatchObject({
      running_before: 1,
      running: 2,
      closed_slots: [1, 2, 3],
    });
    // Two measures decided it: the first one alone sends nobody away.
    const firstMeasure = log.lines.findIndex(
      (l) => l.message === 'one measure found the rate not raised; measuring again',
    );
    expect(firstMeasure).toBeGreaterThanOrEqual(0);
    expect(firstMeasure).toBeLessThan(verdict);
    expect(
      log.lines.some((l) => l.message === 'this relay no longer holds its slot; it stops claiming'),
    ).toBe(false);
    expect(first.published + (others[0]?.published ?? 0)).toBe(events);
    expect(await messagesIn(queue.url)).toBe(events);
    // Closed, not running: a producer's wake still finds no relay running.
    expect(await relaySlotState(db.pool, { maxRelays: 4 })).toMatchObject({ held: 3, running: 0 });
    expect(await relayRunning()).toBe(false);
  }, 120_000);

  it('one measure that finds no rise does not send the relays away: a second one decides', async () => {
    // Every call 200 ms on the network; while the first measure runs, the
    // link passes one call at a time (a busy moment: the two relays share it
    // and together publish no faster than one), then frees up again.
    proxy.delayMs = 200;
    const queue = await createQueue(sqs, uniqueName('scale-out-second-measure'));
    const events = 1_500;
    await insertEvents(db.pool, events);
    const { relay, runs, log } = relayWith(
      [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
      { maxRelays: 2, workers: 1, batchSize: 10, scaleOutBacklog: 50 },
      0,
      proxied,
    );
    const info = log.logger.info;
    log.logger.info = (message: string, ...extra: Array<Record<string, unknown>>) => {
      if (message === 'backlog: started more relays') proxy.oneAtATime = true;
      if (message === 'one measure found the rate not raised; measuring again') proxy.oneAtATime = false;
      return info(message, ...extra);
    };
    const first = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
    const others = await Promise.all(runs);
    const messages = log.lines.map((l) => l.message);
    const again = messages.indexOf('one measure found the rate not raised; measuring again');
    expect(again).toBeGreaterThanOrEqual(0);
    expect(messages.indexOf('more relays raised the rate')).toBeGreaterThan(again);
    expect(messages.some((m) => String(m).startsWith('more relays did not raise'))).toBe(false);
    expect(first.relaysStarted).toBe(1);
    expect(others).toHaveLength(1);
    expect(others[0]?.published).toBeGreaterThan(0);
    expect(first.published + (others[0]?.published ?? 0)).toBe(events);
    expect(await messagesIn(queue.url)).toBe(events);
    // Nothing closed: the slots are free once both relays left.
    expect(await relaySlotState(db.pool, { maxRelays: 2 })).toMatchObject({ held: 0 });
  }, 120_000);

  it('a relay that publishes nothing (its target is missing) starts no relays for the backlog', async () => {
    await insertEvents(db.pool, 10_000);
    const { relay, runs, log } = relayWith(
      [
        {
          match: '*',
          targets: [{ type: 'sqs', queueUrl: `${ministack.endpoint}/000000000000/no-such-queue` }],
        },
      ],
      { maxRelays: 4, workers: 2, batchSize: 10, scaleOutBacklog: 50 },
      0,
      sqs,
      2_000,
    );
    const summary = await relay.run({ remainingMs: budget(8_000), skipStats: true, leaveIfEmpty: true });
    await Promise.all(runs);
    expect(summary.published).toBe(0);
    // Full claims all along: a backlog, which more relays would not publish either.
    expect(summary.claimed).toBeGreaterThan(1_000);
    // None while it drained (out of time, it may start a successor for what is left).
    expect(
      log.lines.some(
        (l) => l.message === 'backlog: started more relays' && l.extra.why === 'a backlog while draining',
      ),
    ).toBe(false);
    expect(summary.relaysStarted).toBeLessThanOrEqual(1);
  }, 60_000);

  it('the relay goes on claiming while it starts relays (a slow Invoke stalls no claim)', async () => {
    // One worker, 20 ms a call: about 500 events a second, for 6 s.
    proxy.delayMs = 20;
    const queue = await createQueue(sqs, uniqueName('scale-out-slow-start'));
    const events = 3_000;
    await insertEvents(db.pool, events);
    const processed = async () =>
      (await db.pool.query('SELECT count(*)::int AS n FROM outbox_events WHERE processed_at IS NOT NULL'))
        .rows[0].n as number;
    const during: number[] = [];
    // An Invoke that takes 2 s, starting nothing.
    const relay = oneWorkerRelay(queue.url, async () => {
      const before = await processed();
      await new Promise((r) => setTimeout(r, 2_000));
      during.push((await processed()) - before);
    });
    const summary = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
    expect(summary.relaysStarted).toBe(1);
    expect(during).toHaveLength(1);
    // Its one worker published while the start was under way.
    expect(during[0]).toBeGreaterThan(100);
    expect(summary.published).toBe(events);
    expect(await messagesIn(queue.url)).toBe(events);
  }, 60_000);

  it('an Invoke that never answers does not keep the run past its time budget', async () => {
    proxy.delayMs = 20;
    const queue = await createQueue(sqs, uniqueName('scale-out-hung-start'));
    const events = 1_500;
    await insertEvents(db.pool, events);
    const relay = oneWorkerRelay(queue.url, () => new Promise<void>(() => {}));
    const started = performance.now();
    const summary = await relay.run({ remainingMs: budget(12_000), skipStats: true, leaveIfEmpty: true });
    // Drained (about 3 s), then waited for the start only until its budget ran out.
    expect(performance.now() - started).toBeLessThan(16_000);
    expect(summary.published).toBe(events);
    expect(await messagesIn(queue.url)).toBe(events);
  }, 60_000);

  it('the claims running behind alone starts relays (OUTBOX_SCALE_OUT_AGE_MS: the age of the oldest event a claim took), however few wait', async () => {
    proxy.delayMs = 200;
    const queue = await createQueue(sqs, uniqueName('scale-out-age'));
    const events = 600;
    await insertEvents(db.pool, events);
    const { relay, runs, log } = relayWith(
      [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
      // A count no backlog here reaches; an age every event here reaches within the first measure.
      { maxRelays: 2, workers: 1, batchSize: 10, scaleOutBacklog: 1_000_000, scaleOutAgeMs: 1_000 },
      0,
      proxied,
    );
    const first = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
    const others = await Promise.all(runs);
    const started = log.lines.find((l) => l.message === 'backlog: started more relays');
    expect(started?.extra).toMatchObject({ started: 1, running: 1 });
    expect(Number(started?.extra.ready_at_least)).toBeLessThan(events);
    expect(Number(started?.extra.lag_ms)).toBeGreaterThanOrEqual(1_000);
    expect(first.relaysStarted).toBe(1);
    expect(first.published + others.reduce((n, o) => n + o.published, 0)).toBe(events);
    expect(await messagesIn(queue.url)).toBe(events);
  }, 120_000);

  it('no backlog, no scale-out', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('scale-out-small'));
    await insertEvents(db.pool, 20);
    const { relay, runs } = relayWith([{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }], {
      maxRelays: 3,
      scaleOutBacklog: 100,
    });
    const summary = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
    expect(summary).toMatchObject({ published: 20, relaysStarted: 0, stoppedBecause: 'idle' });
    expect(runs).toHaveLength(0);
  });

  it('ordered mode: relays started for a backlog keep every aggregate in order', async () => {
    proxy.delayMs = 200;
    const queue = await createQueue(sqs, `${uniqueName('scale-out-order')}.fifo`);
    const aggregates = 12;
    const perAggregate = 80;
    await insertEvents(db.pool, aggregates * perAggregate, (i) => ({
      aggregateId: `agg-${i % aggregates}`,
      eventType: 'order.updated',
      payload: { k: Math.floor(i / aggregates) },
    }));
    const { relay, runs } = relayWith(
      [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
      {
        maxRelays: 3,
        workers: 1,
        batchSize: 10,
        maxPerAggregate: 2,
        ordering: 'aggregate',
        scaleOutBacklog: 50,
      },
      0,
      proxied,
    );
    const first = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
    const others = await Promise.all(runs);
    // One at least (a second when the first measured as raising the rate).
    expect(first.relaysStarted).toBeGreaterThanOrEqual(1);
    expect(others.filter((s) => s.published > 0).length).toBeGreaterThanOrEqual(1);
    const messages = await drainQueue(sqs, queue.url, aggregates * perAggregate, 60_000);
    expect(messages).toHaveLength(aggregates * perAggregate);
    const seen = new Map<string, number[]>();
    for (const m of messages) {
      const body = JSON.parse(m.Body as string);
      const group = m.Attributes?.MessageGroupId as string;
      seen.set(group, [...(seen.get(group) ?? []), body.payload.k]);
    }
    expect(seen.size).toBe(aggregates);
    for (const ks of seen.values()) expect(ks).toEqual(Array.from({ length: perAggregate }, (_, k) => k));
  }, 120_000);
});

describe('scale in', () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  /** A relay with slots and an idle tail, publishing to `queueUrl`, each call `delayMs` late. */
  const slotRelay = (
    queueUrl: string,
    options: ConstructorParameters<typeof Relay>[0]['options'],
    delayMs = 0,
    deps: Partial<ConstructorParameters<typeof Relay>[0]> = {},
  ) => slotRelayTo(db.pool, aws, queueUrl, options ?? {}, delayMs, deps);

  it('relays sharing a trickle leave it to the one holding its slot longest; every event goes out once', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('scale-in'));
    const relays = [0, 1, 2].map(() => slotRelay(queue.url, { batchSize: 100 }));
    // 20 events a second for 12 s: one relay's work, claims far from full.
    let written = 0;
    const writing = (async () => {
      for (let i = 0; i < 120; i++) {
        await insertEvents(db.pool, 2, (k) => ({ aggregateId: `trickle-${i}-${k}` }));
        written += 2;
        await sleep(100);
      }
    })();
    const started = performance.now();
    const ended: number[] = [];
    // Budgets of 40, 50 and 60 s: the third holds its slot longest.
    const summaries = await Promise.all(
      relays.map((relay, i) =>
        relay.run({ remainingMs: budget(40_000 + i * 10_000), skipStats: true }).then((summary) => {
          ended[i] = performance.now() - started;
          return summary;
        }),
      ),
    );
    await writing;
    // The two that end sooner leave once their claims have not been full for 5 s...
    // (On a loaded machine one of them may find nothing for its whole tail first: idle.)
    expect(summaries.map((s) => s.stoppedBecause)).toContain('surplus');
    expect(['surplus', 'idle']).toContain(summaries[0]?.stoppedBecause);
    expect(['surplus', 'idle']).toContain(summaries[1]?.stoppedBecause);
    expect(summaries[2]?.stoppedBecause).toBe('idle');
    expect(ended[0]).toBeLessThan(9_000);
    expect(ended[1]).toBeLessThan(9_000);
    // ... the third drains the trickle to its end, then its tail.
    expect(ended[2]).toBeGreaterThan(12_000);
    expect(summaries.reduce((n, s) => n + s.published, 0)).toBe(written);
    const messages = await drainQueue(aws.sqs, queue.url, written, 60_000);
    expect(new Set(messages.map((m) => JSON.parse(m.Body as string).id)).size).toBe(written);
    expect(await relaySlotState(db.pool, { maxRelays: 3 })).toMatchObject({ held: 0 });
  }, 60_000);

  it('while claims come back full, no relay leaves; when the backlog runs out, all but one leave without their tails', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('scale-in-backlog'));
    const events = 1_200;
    await insertEvents(db.pool, events);
    // Each publish 200 ms late: at most 3 relays × 10 events per 200 ms, so the drain lasts over 6 s.
    // A 5 s tail: a relay's last batch may still be publishing for a second
    // or more on a loaded machine when the kept relay's tail begins.
    const relays = [0, 1, 2].map(() => slotRelay(queue.url, { batchSize: 10, idleTailMs: 5_000 }, 200));
    const started = performance.now();
    const ended: number[] = [];
    const summaries = await Promise.all(
      relays.map((relay, i) =>
        relay.run({ remainingMs: budget(60_000 + i * 1_000), skipStats: true }).then((summary) => {
          ended[i] = performance.now() - started;
          return summary;
        }),
      ),
    );
    expect(Math.min(...ended)).toBeGreaterThan(6_000);
    // Each drained its share: nobody left while claims came back full.
    expect(summaries.every((s) => s.published > events / 6)).toBe(true);
    expect(summaries.reduce((n, s) => n + s.published, 0)).toBe(events);
    // The backlog ran out: the two whose slots end sooner left at their first
    // empty claim; the third, kept for what follows, spent its 5 s tail. (With
    // a tail each, they end within a batch or two of one another.)
    expect(summaries.map((s) => s.stoppedBecause)).toEqual(['surplus', 'surplus', 'idle']);
    expect((ended[2] as number) - Math.max(ended[0] as number, ended[1] as number)).toBeGreaterThan(2_000);
  }, 90_000);

  it('a woken run or a tick defers to a relay that runs; without an idle tail (always on) it does not', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('defer'));
    await insertEvents(db.pool, 5);
    await db.pool.query(
      "INSERT INTO outbox_relay_slots VALUES (0, gen_random_uuid(), now() + interval '1 minute')",
    );
    const deferred = await slotRelay(queue.url, {}).run({
      remainingMs: budget(30_000),
      skipStats: true,
      deferToRunning: true,
    });
    expect(deferred).toMatchObject({ stoppedBecause: 'busy', claimed: 0 });
    // A budget a slow publish on a loaded machine still fits in.
    const alwaysOn = await slotRelay(queue.url, { idleTailMs: null }).run({
      remainingMs: budget(5_000),
      skipStats: true,
      deferToRunning: true,
    });
    expect(alwaysOn).toMatchObject({ stoppedBecause: 'time', published: 5, slot: 1 });
  }, 30_000);

  it('always on with one slot: the next run takes the slot as soon as the last one returns, not when its hold runs out', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('handover'));
    const options = { idleTailMs: null, maxRelays: 1, safetyMarginMs: 5_000 };
    // The last run holds its slot for its budget (8 s) and returns 5 s
    // before (its safety margin), as a deployed run returns before its timeout.
    const last = slotRelay(queue.url, options).run({ remainingMs: budget(8_000), skipStats: true });
    await sleep(500);
    // The schedule's next run overlaps it and waits for the slot.
    const next = slotRelay(queue.url, options).run({ remainingMs: budget(24_000), skipStats: true });
    expect(await last).toMatchObject({ stoppedBecause: 'time' });
    const returnedAt = performance.now();
    await insertEvents(db.pool, 1);
    let waitedMs = Number.POSITIVE_INFINITY;
    while (performance.now() - returnedAt < 10_000) {
      const { rows } = await db.pool.query(
        'SELECT count(*)::int AS n FROM outbox_events WHERE processed_at IS NULL',
      );
      if (rows[0].n === 0) {
        waitedMs = performance.now() - returnedAt;
        break;
      }
      await sleep(20);
    }
    // Not the 4.5 s until the last run's hold would have run out.
    expect(waitedMs).toBeLessThan(2_000);
    expect(await next).toMatchObject({ stoppedBecause: 'time', published: 1, slot: 0 });
  }, 40_000);

  it('a relay killed mid-run holds back woken runs only until its slot is no longer renewed', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('dead-holder'));
    // A relay that renewed its slot, then died (its budget had a minute to go).
    await db.pool.query(
      "INSERT INTO outbox_relay_slots VALUES (0, gen_random_uuid(), now() + interval '1 minute', now() + interval '700 milliseconds')",
    );
    await insertEvents(db.pool, 4);
    const wake = () =>
      slotRelay(queue.url, { slotAliveMs: 700 }).run({
        remainingMs: budget(30_000),
        skipStats: true,
        deferToRunning: true,
      });
    expect(await wake()).toMatchObject({ stoppedBecause: 'busy', claimed: 0 });
    await new Promise((r) => setTimeout(r, 800));
    // Its slot is free: the next wake drains what waited, then leaves.
    expect(await wake()).toMatchObject({ stoppedBecause: 'idle', published: 4 });
    expect(await drainQueue(aws.sqs, queue.url, 4)).toHaveLength(4);
  }, 30_000);

  it('an event committed while a leaving relay still held its slot is taken by that relay', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('leaving'));
    // A producer commits just before the relay lets its slot go: it saw the
    // slot held, so it woke nobody (createRelayWaker with db).
    let late: string[] = [];
    const pool: Queryable = {
      query: async (text: string, values?: unknown[]) => {
        if (late.length === 0 && /^DELETE FROM .*outbox_relay_slots/.test(text.trim()))
          late = await insertEvents(db.pool, 1, () => ({ aggregateId: 'late' }));
        return db.pool.query(text, values);
      },
    } as Queryable;
    const relay = slotRelay(queue.url, { idleTailMs: 500 }, 0, { db: pool });
    const summary = await relay.run({ remainingMs: budget(30_000), skipStats: true, deferToRunning: true });
    expect(late).toHaveLength(1);
    expect(summary).toMatchObject({ stoppedBecause: 'idle', published: 1 });
    const { rows } = await db.pool.query('SELECT processed_at FROM outbox_events WHERE id = $1', [late[0]]);
    expect(rows[0].processed_at).not.toBeNull();
    expect(await relaySlotState(db.pool, { maxRelays: 3 })).toMatchObject({ held: 0 });
  }, 30_000);

  it('a relay out of time with events left and no relay to take them starts a successor', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('successor'));
    let started = 0;
    // Slower than the trickle (2 events per 300 ms publish), so events are left when its time is up.
    const relay = slotRelay(queue.url, { idleTailMs: 2_000, batchSize: 2 }, 300, {
      startRelays: async (count) => {
        started += count;
      },
    });
    // A trickle of 10 events a second that outlasts the run's budget: under
    // the thresholds that start relays for a backlog.
    let writing = true;
    const producing = (async () => {
      while (writing) {
        await insertEvents(db.pool, 1);
        await sleep(100);
      }
    })();
    const summary = await relay.run({ remainingMs: budget(2_000), skipStats: true });
    await sleep(300);
    writing = false;
    await producing;
    expect(summary.stoppedBecause).toBe('time');
    expect(started).toBe(1);
    expect(summary.relaysStarted).toBe(1);
  }, 30_000);

  it('a relay out of time with a backlog starts a successor, though other relays run', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('successor-backlog'));
    await insertEvents(db.pool, 200);
    // Another relay runs (slot 0, alive): this one is not alone, and not the one that scales.
    await db.pool.query(
      "INSERT INTO outbox_relay_slots VALUES (0, gen_random_uuid(), now() + interval '1 minute', now() + interval '1 minute')",
    );
    let started = 0;
    const log = captureLogger();
    const relay = slotRelay(queue.url, { idleTailMs: 2_000, batchSize: 2, scaleOutBacklog: 50 }, 300, {
      startRelays: async (count) => {
        started += count;
      },
      logger: log.logger,
    });
    const summary = await relay.run({ remainingMs: budget(2_000), skipStats: true });
    expect(summary).toMatchObject({ stoppedBecause: 'time', slot: 1, relaysStarted: 1 });
    expect(started).toBe(1);
    const why = log.lines.filter((l) => l.message === 'backlog: started more relays').map((l) => l.extra.why);
    expect(why).toEqual(['the run ended with a backlog']);
  }, 30_000);

  it('a relay leaving an ordered outbox with an aggregate held behind a dead letter looks once, not again and again', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('blocked')}.fifo`);
    await insertEvents(db.pool, 5, () => ({ aggregateId: 'blocked' }));
    // Its first event is a dead letter: the other four are ready, and nobody may claim them (block policy).
    await db.pool.query(
      "UPDATE outbox_events SET dead_lettered_at = now(), last_error = 'poison' WHERE seq = (SELECT min(seq) FROM outbox_events)",
    );
    let started = 0;
    const relay = slotRelay(queue.url, { idleTailMs: 300, ordering: 'aggregate' }, 0, {
      startRelays: async (count) => {
        started += count;
      },
    });
    const t0 = performance.now();
    const summary = await relay.run({ remainingMs: budget(20_000), skipStats: true, leaveIfEmpty: true });
    expect(summary).toMatchObject({ stoppedBecause: 'idle', claimed: 0 });
    expect(performance.now() - t0).toBeLessThan(3_000);
    expect(started).toBe(0);
  }, 30_000);
});
