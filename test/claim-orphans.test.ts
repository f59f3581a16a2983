// Orphans are reclaimed in batches: rows whose lease ran out without an
// outcome (here: the relay's complete() gave up on a database blip, the rows
// were already published) cost a relay about what fresh events do, instead of
// one round trip each while it claims nothing else. The claim is what is
// under test, so a test publisher stands in for the target: 20 ms a call.
import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import type { OutboxEvent } from '../lib/outbox/types.js';
import type { Publisher, PublishOutcome } from '../lib/publish/types.js';
import { Relay } from '../lib/relay/relay.js';
import { claimBatch } from '../lib/sql/claim-batch.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger, insertEvents } from './support/events.js';

const db = useTestDatabase();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

/** Publishes everything, 20 ms a call; counts the calls and each event's publications. */
function slowTarget() {
  const published = new Map<string, number>();
  let calls = 0;
  const publisher: Publisher = {
    async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
      calls++;
      await new Promise((resolve) => setTimeout(resolve, 20));
      for (const e of events) published.set(e.id, (published.get(e.id) ?? 0) + 1);
      return events.map((e) => ({ eventId: e.id, ok: true as const, delivered: [] }));
    },
  };
  return { publisher, published, calls: () => calls };
}

/** Drains the outbox with one relay (batches of 100); returns its publish calls and time. */
async function drain() {
  const target = slowTarget();
  const relay = new Relay({
    db: db.pool,
    publisher: target.publisher,
    options: { batchSize: 100, safetyMarginMs: 0, idleWaitMs: 20, maxAttempts: 5 },
    logger: captureLogger().logger,
  });
  const started = performance.now();
  await relay.run({ remainingMs: () => 60_000, stopWhenIdle: true, skipStats: true });
  return { calls: target.calls(), ms: performance.now() - started, published: target.published };
}

describe('orphans of lost leases', () => {
  it('400 orphans and 2,000 fresh events take at most 1.5 times the batches of 2,400 fresh ones', async () => {
    await insertEvents(db.pool, 2_400);
    const fresh = await drain();
    expect(fresh.published.size).toBe(2_400);

    await db.pool.query('TRUNCATE outbox_events');
    const orphans = await insertEvents(db.pool, 400);
    // Four batches of 100 whose outcome was never recorded: their leases run out.
    for (let i = 0; i < 4; i++) {
      const claim = await claimBatch(db.pool, {
        limit: 100,
        leaseMs: 60_000,
        leaseId: randomUUID(),
        maxAttempts: 5,
        ordered: false,
      });
      expect(claim.events).toHaveLength(100);
    }
    await db.pool.query(`UPDATE outbox_events SET locked_until = now() - interval '1 ms'`);
    await insertEvents(db.pool, 2_000, (i) => ({ aggregateId: `fresh-${i}` }));

    const mixed = await drain();
    expect(mixed.published.size).toBe(2_400);
    expect([...mixed.published.values()].every((n) => n === 1)).toBe(true);
    // Before: each orphan went alone, the relay claiming nothing else meanwhile
    // (420 calls, 14 s where 2,400 fresh events took 0.8 s).
    expect(mixed.calls).toBeLessThanOrEqual(1.5 * fresh.calls);
    // The lost leases cost the orphans nothing: one attempt each, the one that was lost.
    const { rows } = await db.pool.query(
      `SELECT max(attempts)::int AS attempts, count(*) FILTER (WHERE processed_at IS NULL)::int AS left
       FROM outbox_events WHERE id = ANY($1::uuid[])`,
      [orphans],
    );
    expect(rows[0]).toEqual({ attempts: 1, left: 0 });
    console.log(
      `orphans: ${mixed.calls} calls in ${Math.round(mixed.ms)} ms; fresh: ${fresh.calls} calls in ${Math.round(fresh.ms)} ms`,
    );
  }, 120_000);
});
