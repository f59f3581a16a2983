// A burst of commits from many producer processes before the first woken
// relay holds its slot (issue 33, F5). Each producer has a waker and a
// connection of its own, as separate processes would; the "Lambda" is a fake
// whose asynchronous Invoke starts, after a cold start, a real relay run in
// this process against the real database, with its own pool, as
// functions/relay.ts runs one.
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { withTransaction } from '../lib/db/transaction.js';
import { enqueueEvent } from '../lib/outbox/enqueue.js';
import { createRelayWaker, type LambdaSender, type WakeOutcome } from '../lib/outbox/relay-waker.js';
import type { OutboxEvent } from '../lib/outbox/types.js';
import type { Publisher, PublishOutcome } from '../lib/publish/types.js';
import { Relay, type RelaySummary } from '../lib/relay/relay.js';
import { useTestDatabase } from './support/database.js';

const db = useTestDatabase({ poolSize: 2 });

const PRODUCERS = 20;
const COMMITS = 200;
const COLD_START_MS = 500;
/** As deployed: maxRelays 4, OUTBOX_WORKERS 2. */
const MAX_RELAYS = 4;
const WORKERS = 2;
/** The relays' connection budget: maxRelays × (workers + 1) (lib/config/relay-config.ts). */
const BUDGET = MAX_RELAYS * (WORKERS + 1);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a burst of wakes', () => {
  it('20 producers, a 500 ms cold start, 200 commits: at most maxRelays + 1 invocations, sessions within the budget, every event published', async () => {
    const database = new URL(db.url).pathname.slice(1);
    const committedAt = new Map<string, number>();
    const publishedAt = new Map<string, number>();
    const publisher: Publisher = {
      async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
        for (const e of events) if (!publishedAt.has(e.id)) publishedAt.set(e.id, Date.now());
        return events.map((e) => ({ eventId: e.id, ok: true as const, delivered: ['fake'] }));
      },
    };

    // The relay function: each invocation a cold start, then a pool of its
    // own (workers + 1), closed when the run returns.
    const runs: Array<Promise<RelaySummary>> = [];
    let invocations = 0;
    function invokeRelay(source: 'wake' | 'scale-out'): void {
      invocations++;
      runs.push(
        (async () => {
          await sleep(COLD_START_MS);
          const pool = new pg.Pool({
            connectionString: db.url,
            max: WORKERS + 1,
            application_name: 'burst-relay',
          });
          try {
            const relay = new Relay({
              db: pool,
              publisher,
              options: { maxRelays: MAX_RELAYS, workers: WORKERS, idleTailMs: 1_000, safetyMarginMs: 0 },
              startRelays: async (count) => {
                for (let i = 0; i < count; i++) invokeRelay('scale-out');
              },
            });
            const end = performance.now() + 30_000;
            return await relay.run({
              remainingMs: () => end - performance.now(),
              deferToRunning: source === 'wake',
              skipStats: true,
            });
          } finally {
            await pool.end();
          }
        })(),
      );
    }
    const lambda: LambdaSender = {
      async send() {
        invokeRelay('wake');
        return { StatusCode: 202 };
      },
    };

    // Sessions of the test database, polled from the admin database.
    const monitor = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
    await monitor.connect();
    const peak = { relays: 0, all: 0 };
    let watching = true;
    const watched = (async () => {
      while (watching) {
        const { rows } = await monitor.query(
          `SELECT count(*) FILTER (WHERE application_name = 'burst-relay')::int AS relays, count(*)::int AS "all"
           FROM pg_stat_activity WHERE datname = $1`,
          [database],
        );
        peak.relays = Math.max(peak.relays, rows[0].relays);
        peak.all = Math.max(peak.all, rows[0].all);
        await sleep(5);
      }
    })();

    const producers = await Promise.all(
      Array.from({ length: PRODUCERS }, async () => {
        const pool = new pg.Pool({ connectionString: db.url, max: 1, application_name: 'burst-producer' });
        await pool.query('SELECT 1');
        return { pool, waker: createRelayWaker({ functionName: 'relay', lambda, db: pool }) };
      }),
    );
    const ownSessions = db.pool.totalCount;
    const outcomes: WakeOutcome[] = [];
    const wakeMs: number[] = [];
    try {
      // 200 commits over about two seconds, each followed by its wake.
      await Promise.all(
        producers.map(async ({ pool, waker }, p) => {
          for (let i = 0; i < COMMITS / PRODUCERS; i++) {
            await sleep(Math.random() * 400);
            const id = await withTransaction(pool, (client) =>
              enqueueEvent(client, {
                aggregateType: 'order',
                aggregateId: `order-${p}-${i}`,
                eventType: 'order.created',
                payload: { p, i },
              }),
            );
            committedAt.set(id, Date.now());
            const started = performance.now();
            outcomes.push(await waker.wake());
            wakeMs.push(performance.now() - started);
          }
        }),
      );
      const deadline = Date.now() + 20_000;
      while (publishedAt.size < COMMITS && Date.now() < deadline) await sleep(50);
      // Every run returns (its idle tail) before the figures are read.
      for (let settled = 0; settled < runs.length; settled = runs.length) await Promise.all(runs);
    } finally {
      watching = false;
      await watched;
      await monitor.end();
      await Promise.all(producers.map(({ pool }) => pool.end()));
    }

    const summaries = await Promise.all(runs);
    const lags = [...committedAt]
      .map(([id, at]) => (publishedAt.get(id) ?? Number.NaN) - at)
      .sort((a, b) => a - b);
    const count = (outcome: WakeOutcome) => outcomes.filter((o) => o === outcome).length;
    console.log(
      `wake burst: ${invocations} invocations (${summaries.filter((s) => s.stoppedBecause === 'busy').length} busy), ` +
        `peak sessions ${peak.all} (relays ${peak.relays}; budget ${BUDGET}, producers ${PRODUCERS}), ` +
        `wakes: ${count('invoked')} invoked, ${count('debounced')} debounced, ${count('relay-running')} relay-running, ` +
        `${count('in-flight')} in-flight; slowest wake ${Math.round(Math.max(...wakeMs))} ms; ` +
        `commit → published p50 ${lags[Math.floor(lags.length / 2)]} ms, max ${lags[lags.length - 1]} ms`,
    );
    expect(publishedAt.size).toBe(COMMITS);
    expect(invocations).toBeLessThanOrEqual(MAX_RELAYS + 1);
    expect(peak.relays).toBeLessThanOrEqual(BUDGET);
    expect(peak.all).toBeLessThanOrEqual(BUDGET + PRODUCERS + ownSessions);
  }, 90_000);
});
