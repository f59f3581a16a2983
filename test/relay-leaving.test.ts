// How a relay with slots leaves: the seams where an event could wait for the
// schedule (F2: a commit inside the leaving relay's last look; a slot lost
// to a late renewal) or a relay could stay for nothing (F4: events nobody
// may claim kept counting as backlog). Against PostgreSQL and real queues of
// the emulator; the relays are real Relay runs in this process.
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import type { Queryable } from '../lib/db/queryable.js';
import { createRelayWaker } from '../lib/outbox/relay-waker.js';
import type { Relay, RelaySummary } from '../lib/relay/relay.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger, insertEvents } from './support/events.js';
import { slotRelay as slotRelayTo } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const budget = (ms: number) => {
  const end = performance.now() + ms;
  return () => end - performance.now();
};

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, outbox_relay_slots');
});

/** A relay with slots and a 300 ms idle tail, publishing to `queueUrl`, each call `delayMs` late. */
const slotRelay = (
  queueUrl: string,
  options: ConstructorParameters<typeof Relay>[0]['options'],
  delayMs = 0,
  deps: Partial<ConstructorParameters<typeof Relay>[0]> = {},
) => slotRelayTo(db.pool, aws, queueUrl, { idleTailMs: 300, ...options }, delayMs, deps);

const isClaim = (text: string) => text.includes('SKIP LOCKED') && text.includes('locked_until');
const processed = async (id: string) =>
  (await db.pool.query('SELECT processed_at FROM outbox_events WHERE id = $1', [id])).rows[0]?.processed_at;

describe('leaving', () => {
  const woken: Promise<RelaySummary>[] = [];
  afterAll(async () => {
    await Promise.allSettled(woken);
  });

  it('an event committed inside a leaving relay’s last look is published without waiting for the schedule (F2)', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('last-look'));
    await insertEvents(db.pool, 3);
    // The producer's waker, as deployed with db: a relay holding a slot
    // means "it takes the event"; otherwise it invokes a relay (here a run
    // in this process, as the handler runs a woken one).
    let invocations = 0;
    const waker = createRelayWaker({
      functionName: 'relay',
      db: db.pool,
      lambda: {
        send: async () => {
          invocations++;
          woken.push(
            slotRelay(queue.url, {}).run({
              remainingMs: budget(20_000),
              skipStats: true,
              deferToRunning: true,
            }),
          );
          return {};
        },
      },
    });
    // The window: the relay has let its slot go once and its last look's
    // claim has just found nothing. A producer commits and wakes right then.
    let released = false;
    let late: string[] = [];
    const pool = {
      query: async (text: string, values?: unknown[]) => {
        if (/^DELETE FROM .*outbox_relay_slots/.test(text.trim())) released = true;
        const result = await db.pool.query(text, values);
        if (released && late.length === 0 && isClaim(text) && result.rows.length === 0) {
          late = await insertEvents(db.pool, 1, () => ({ aggregateId: 'late' }));
          await waker.wake();
        }
        return result;
      },
    } as Queryable;
    const relay = slotRelay(queue.url, {}, 0, { db: pool });
    const summary = await relay.run({ remainingMs: budget(20_000), skipStats: true, deferToRunning: true });
    expect(summary).toMatchObject({ published: 3 });
    expect(late).toHaveLength(1);
    // Published by a relay within seconds, not by the schedule's next tick.
    const deadline = performance.now() + 5_000;
    while (!(await processed(late[0] as string)) && performance.now() < deadline) await sleep(50);
    expect(await processed(late[0] as string)).not.toBeNull();
    expect(invocations).toBeLessThanOrEqual(1);
    await Promise.all(woken);
    expect(await drainQueue(aws.sqs, queue.url, 4)).toHaveLength(4);
  }, 30_000);

  it('a failed last look is logged and the run still returns what it did', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('look-fails'));
    await insertEvents(db.pool, 2);
    let released = false;
    const pool = {
      query: async (text: string, values?: unknown[]) => {
        if (/^DELETE FROM .*outbox_relay_slots/.test(text.trim())) released = true;
        if (released && isClaim(text)) throw new Error('the database went away');
        return db.pool.query(text, values);
      },
    } as Queryable;
    const log = captureLogger();
    const relay = slotRelay(queue.url, {}, 0, { db: pool, logger: log.logger });
    const summary = await relay.run({ remainingMs: budget(20_000), skipStats: true });
    expect(summary).toMatchObject({ stoppedBecause: 'idle', published: 2 });
    expect(log.lines.some((l) => l.message === 'could not look for events as this relay left')).toBe(true);
  }, 30_000);

  it('a relay whose slot renewal came late (the slot lapsed) still takes the backlog it was draining', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('late-renewal'));
    await insertEvents(db.pool, 60);
    // One renewal stalls past alive_until (a database hiccup): the slot lapses and the run stops as busy.
    let stalled = false;
    const pool = {
      query: async (text: string, values?: unknown[]) => {
        if (!stalled && /UPDATE \S*outbox_relay_slots/.test(text)) {
          stalled = true;
          await sleep(900);
        }
        return db.pool.query(text, values);
      },
    } as Queryable;
    const log = captureLogger();
    const relay = slotRelay(queue.url, { slotAliveMs: 400, batchSize: 5 }, 100, {
      db: pool,
      logger: log.logger,
    });
    const summary = await relay.run({ remainingMs: budget(30_000), skipStats: true, deferToRunning: true });
    expect(stalled).toBe(true);
    expect(
      log.lines.some((l) => l.message === 'this relay no longer holds its slot; it stops claiming'),
    ).toBe(true);
    // It looked as it left and ran again: every event is out, none waits for the schedule.
    expect(summary.published).toBe(60);
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox_events WHERE processed_at IS NULL',
    );
    expect(rows[0].n).toBe(0);
  }, 30_000);

  it('events blocked behind a dead letter are no backlog: a second relay leaves once the trickle is all that is left (F4)', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('blocked-trickle')}.fifo`);
    // An aggregate held behind a dead letter, its rows a minute old (older than scaleOutAgeMs).
    await insertEvents(db.pool, 5, () => ({ aggregateId: 'blocked' }));
    await db.pool.query("UPDATE outbox_events SET created_at = now() - interval '1 minute'");
    await db.pool.query(
      "UPDATE outbox_events SET dead_lettered_at = now(), last_error = 'poison' WHERE seq = (SELECT min(seq) FROM outbox_events)",
    );
    const options = { ordering: 'aggregate' as const, idleTailMs: 2_000, maxRelays: 2 };
    let writing = true;
    const producing = (async () => {
      for (let i = 0; writing; i++) {
        await insertEvents(db.pool, 1, () => ({ aggregateId: `trickle-${i}` }));
        await sleep(100);
      }
    })();
    const started = performance.now();
    const ended: number[] = [];
    // Budgets of 10 and 12 s: the second holds its slot longer and keeps the trickle.
    const summaries = await Promise.all(
      [10_000, 12_000].map((ms, i) =>
        slotRelay(queue.url, options)
          .run({ remainingMs: budget(ms), skipStats: true })
          .then((s) => {
            ended[i] = performance.now() - started;
            return s;
          }),
      ),
    );
    writing = false;
    await producing;
    // It leaves as surplus once a claim finds nothing after work (or, on a
    // loaded machine where the other relay took every event for 2 s, at the
    // end of its tail). Before: it stayed to its end (10 s), the blocked
    // rows' age calling for relays.
    expect(['surplus', 'idle']).toContain(summaries[0]?.stoppedBecause);
    expect(ended[0]).toBeLessThan(7_000);
  }, 40_000);
});
