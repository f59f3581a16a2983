// Scale to zero: with an idle tail, a relay run returns once nothing has
// been found to claim for that long, and keeps draining while work arrives.
// Against PostgreSQL and a real queue of the emulator.
import { beforeEach, describe, expect, it } from 'vitest';
import { loadRelayConfig } from '../lib/config/relay-config.js';
import { ConfigError } from '../lib/errors.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import { resolveRelayOptions } from '../lib/relay/options.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';
import { emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

const budget = (ms: number) => {
  const end = performance.now() + ms;
  return () => end - performance.now();
};

async function routesToNewQueue(): Promise<{ routes: RouteConfig[]; url: string }> {
  const queue = await createQueue(aws.sqs, uniqueName('idle-tail'));
  return { routes: [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }], url: queue.url };
}

describe('the idle tail', () => {
  it('an idle relay returns within its tail, not at the end of its budget', async () => {
    const { routes } = await routesToNewQueue();
    const { relay } = emulatorRelay(db.pool, aws, routes, { idleTailMs: 500, idleWaitMs: 100 });
    const started = performance.now();
    const summary = await relay.run({ remainingMs: budget(60_000), skipStats: true });
    const took = performance.now() - started;
    expect(summary).toMatchObject({ stoppedBecause: 'idle', claimed: 0 });
    expect(took).toBeGreaterThanOrEqual(500);
    expect(took).toBeLessThan(2_000);
  });

  it('keeps draining while work arrives and returns a tail after the last of it', async () => {
    const { routes, url } = await routesToNewQueue();
    // The tail is ten times the gap between writes: a write delayed by a
    // loaded machine (other test files run beside this one) still comes
    // within it.
    const { relay } = emulatorRelay(db.pool, aws, routes, { idleTailMs: 1_500, idleWaitMs: 100, workers: 2 });
    await insertEvents(db.pool, 100); // a backlog to start with
    let written = 100;
    // Then an event every 150 ms for 3 s: never a gap as long as the tail.
    const producing = (async () => {
      for (let i = 0; i < 20; i++) {
        await new Promise((r) => setTimeout(r, 150));
        await insertEvents(db.pool, 1, () => ({ aggregateId: `late-${i}` }));
        written++;
      }
      return performance.now();
    })();
    const summary = await relay.run({ remainingMs: budget(60_000), skipStats: true });
    const lastWriteAt = await producing;
    const returnedAt = performance.now();
    const returnedAtClock = Date.now();
    expect(summary).toMatchObject({ stoppedBecause: 'idle', published: written, deadLettered: 0 });
    // Returned after the last event went out and the tail passed, well before
    // the budget. The tail runs from when the last event was marked published
    // (a publish slowed by a loaded machine comes before it).
    expect(returnedAt - lastWriteAt).toBeGreaterThanOrEqual(1_500 - 200);
    const { rows } = await db.pool.query(
      'SELECT extract(epoch FROM max(processed_at)) * 1000 AS ms FROM outbox_events',
    );
    expect(returnedAtClock - Number(rows[0].ms)).toBeGreaterThanOrEqual(1_500 - 200);
    expect(returnedAtClock - Number(rows[0].ms)).toBeLessThan(3_000);
    expect(await drainQueue(aws.sqs, url, written)).toHaveLength(written);
  }, 60_000);

  it('a woken run waits no longer than a new start costs (ski rental), a run of the schedule its whole tail', async () => {
    const { routes, url } = await routesToNewQueue();
    await db.pool.query('TRUNCATE outbox_relay_slots');
    const options = { idleTailMs: 1_000, idleWaitMs: 20, maxRelays: 2 };
    const { relay } = emulatorRelay(db.pool, aws, routes, options);
    await insertEvents(db.pool, 1);
    // 24 ms: Lambda's request price at 512 MB, plus the run's own start work.
    const t0 = performance.now();
    const woken = await relay.run({
      remainingMs: budget(60_000),
      skipStats: true,
      woken: true,
      startPriceMs: 24,
    });
    const wokenMs = performance.now() - t0;
    expect(woken).toMatchObject({ stoppedBecause: 'idle', published: 1 });
    // Its tail ~50 ms and a start; the configured tail alone is 1 s.
    expect(wokenMs).toBeLessThan(700);
    await insertEvents(db.pool, 1);
    const t1 = performance.now();
    const ticked = await relay.run({ remainingMs: budget(60_000), skipStats: true });
    expect(ticked).toMatchObject({ stoppedBecause: 'idle', published: 1 });
    expect(performance.now() - t1).toBeGreaterThanOrEqual(1_000);
    expect(await drainQueue(aws.sqs, url, 2)).toHaveLength(2);
  }, 30_000);

  it('leaveIfEmpty: a run whose first claim finds nothing returns at once, without the tail', async () => {
    const { routes } = await routesToNewQueue();
    const { relay } = emulatorRelay(db.pool, aws, routes, { idleTailMs: 3_000, idleWaitMs: 100, workers: 3 });
    const started = performance.now();
    const summary = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
    expect(summary).toMatchObject({ stoppedBecause: 'idle', claimed: 0, batches: 0 });
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('leaveIfEmpty: a run whose first claim finds work drains with every worker, then keeps its tail', async () => {
    const { routes, url } = await routesToNewQueue();
    const { relay } = emulatorRelay(db.pool, aws, routes, {
      idleTailMs: 600,
      idleWaitMs: 100,
      workers: 2,
      batchSize: 20,
    });
    await insertEvents(db.pool, 120);
    const late = (async () => {
      await new Promise((r) => setTimeout(r, 400));
      await insertEvents(db.pool, 1, () => ({ aggregateId: 'late' }));
    })();
    // Both workers claim: the second starts once the first has found work.
    const claimers = new Set<number>();
    const watching = setInterval(async () => {
      const { rows } = await db.pool.query(
        'SELECT count(DISTINCT locked_by)::int AS n FROM outbox_events WHERE locked_until > now() AND processed_at IS NULL',
      );
      claimers.add(rows[0].n);
    }, 5);
    const summary = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
    clearInterval(watching);
    await late;
    expect(summary).toMatchObject({ stoppedBecause: 'idle', published: 121, deadLettered: 0 });
    expect(Math.max(...claimers)).toBe(2);
    expect(await drainQueue(aws.sqs, url, 121)).toHaveLength(121);
  }, 60_000);

  it('a retry coming due within the tail keeps the run for it, instead of leaving it to the schedule', async () => {
    const { routes, url } = await routesToNewQueue();
    const { relay } = emulatorRelay(db.pool, aws, routes, { idleTailMs: 500, idleWaitMs: 50 });
    const [id] = await insertEvents(db.pool, 1);
    await db.pool.query(
      "UPDATE outbox_events SET attempts = 1, retry_after = now() + interval '300 milliseconds' WHERE id = $1",
      [id],
    );
    const summary = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
    expect(summary).toMatchObject({ stoppedBecause: 'idle', published: 1 });
    expect(await drainQueue(aws.sqs, url, 1)).toHaveLength(1);
  });

  it('at the end of its tail a run stays for a retry due within another tail, and leaves one due later to the next run', async () => {
    for (const [dueInMs, published] of [
      [1_600, 2],
      [6_000, 1],
    ] as const) {
      await db.pool.query('TRUNCATE outbox_events');
      const { routes, url } = await routesToNewQueue();
      const { relay } = emulatorRelay(db.pool, aws, routes, { idleTailMs: 1_000, idleWaitMs: 50 });
      // One event ready (the first claim finds work, so the tail decides),
      // one that failed once and is retried after its backoff.
      const [, retried] = await insertEvents(db.pool, 2);
      await db.pool.query(
        `UPDATE outbox_events SET attempts = 1, retry_after = now() + $2 * interval '1 millisecond' WHERE id = $1`,
        [retried, dueInMs],
      );
      const summary = await relay.run({ remainingMs: budget(60_000), skipStats: true, leaveIfEmpty: true });
      expect(summary).toMatchObject({ stoppedBecause: 'idle', published });
      const { rows } = await db.pool.query(
        'SELECT processed_at IS NULL AS pending FROM outbox_events WHERE id = $1',
        [retried],
      );
      // Due 1.6 s after the start: past the tail (1 s), within the next.
      // Due 6 s after: the run left a tail after its last work (a publish that
      // a loaded machine makes slow moves that, so not 2 s but 6); the
      // schedule's next run takes it.
      expect(rows[0].pending).toBe(published === 1);
      expect(await drainQueue(aws.sqs, url, published)).toHaveLength(published);
    }
  }, 60_000);

  it('without a tail (the default), a run polls to its budget as before', async () => {
    const { routes } = await routesToNewQueue();
    const { relay } = emulatorRelay(db.pool, aws, routes, { idleWaitMs: 100 });
    const started = performance.now();
    const summary = await relay.run({ remainingMs: budget(1_500), skipStats: true });
    expect(summary.stoppedBecause).toBe('time');
    expect(performance.now() - started).toBeGreaterThanOrEqual(1_400);
  });

  it('without a tail, leaveIfEmpty changes nothing: an always-on run polls to its budget', async () => {
    const { routes } = await routesToNewQueue();
    const { relay } = emulatorRelay(db.pool, aws, routes, { idleWaitMs: 100 });
    const started = performance.now();
    const summary = await relay.run({ remainingMs: budget(1_500), skipStats: true, leaveIfEmpty: true });
    expect(summary.stoppedBecause).toBe('time');
    expect(performance.now() - started).toBeGreaterThanOrEqual(1_400);
  });

  it('OUTBOX_IDLE_TAIL_MS sets it; a bad value names the variable', () => {
    const routes = JSON.stringify([{ match: '*', targets: [{ type: 'sqs', queueUrl: 'https://q/1' }] }]);
    expect(loadRelayConfig({ OUTBOX_ROUTES: routes, OUTBOX_IDLE_TAIL_MS: '3000' }).relay.idleTailMs).toBe(
      3000,
    );
    expect(loadRelayConfig({ OUTBOX_ROUTES: routes }).relay.idleTailMs).toBeUndefined();
    expect(() => loadRelayConfig({ OUTBOX_ROUTES: routes, OUTBOX_IDLE_TAIL_MS: 'soon' })).toThrow(
      /OUTBOX_IDLE_TAIL_MS/,
    );
    expect(() => resolveRelayOptions({ idleTailMs: -1 })).toThrow(ConfigError);
  });
});
