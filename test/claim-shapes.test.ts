// Every ordered claim shape is cheap (DESIGN.md, guarantee 12): with 100,000
// aggregates, the cost of a claim is bounded by what it can take, whatever
// the table holds: held heads with events behind them (with and without
// healthy aggregates beside them), one deep aggregate at the front (leased by
// another relay or not), rows left by an older relay during an outage. The
// cost is counted as the rows every node of the claim's plan produced or
// filtered away (EXPLAIN ANALYZE), which does not depend on the machine's
// load; the claim this replaced probed every aggregate in each of these
// shapes (100,000 rows and more, 1-3 s a claim).
import { randomUUID } from 'node:crypto';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Queryable } from '../lib/db/queryable.js';
import { type ClaimParams, claimBatch } from '../lib/sql/claim-batch.js';
import { outboxStats } from '../lib/sql/outbox-stats.js';
import { retryDueWithin } from '../lib/sql/relay-slots.js';
import { useTestDatabase } from './support/database.js';
import { type PlanNode, rowsTouched } from './support/plan.js';

const db = useTestDatabase();
const AGGREGATES = 100_000;

beforeAll(async () => {
  await db.pool.query('ALTER TABLE outbox_events SET (autovacuum_enabled = false)');
});
beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

const params = (overrides: Partial<ClaimParams> = {}): ClaimParams => ({
  limit: 100,
  leaseMs: 60_000,
  leaseId: randomUUID(),
  maxAttempts: 20,
  ordered: true,
  ...overrides,
});

/** The claim's result and the rows its plan touched, in a transaction rolled back afterwards. */
async function measure(p: ClaimParams = params()) {
  const client = await db.pool.connect();
  try {
    let text = '';
    let values: unknown[] = [];
    const recording: Queryable = {
      query: ((sql: string, v: unknown[]) => {
        text = sql;
        values = v;
        return client.query(sql, v);
      }) as Queryable['query'],
    };
    await client.query('BEGIN');
    const result = await claimBatch(recording, p);
    await client.query('ROLLBACK');
    await client.query('BEGIN');
    const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
    await client.query('ROLLBACK');
    return { result, touched: rowsTouched(rows[0]['QUERY PLAN'][0].Plan as PlanNode) };
  } finally {
    client.release();
  }
}

/**
 * What a relay's claims do to the shape before the next one: claims run
 * (committed) until the rows in the claim's way are parked; the leases they
 * took are then given back (as an outcome that retries at once would), so
 * the shape is as it was, as the relay's next claim finds it.
 */
async function settle() {
  let parked = -1;
  for (let i = 0; i < 100; i++) {
    for (let k = 0; k < 20; k++) await claimBatch(db.pool, params());
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM outbox_events WHERE parked_until > now() AND retry_after = parked_until`,
    );
    if (rows[0].n === parked) break;
    parked = rows[0].n;
  }
  await db.pool.query(
    `UPDATE outbox_events SET locked_until = NULL, locked_by = NULL, attempts = attempts - 1
     WHERE locked_until > now() AND locked_by IS NOT NULL AND aggregate_id <> 'other-relay'`,
  );
}

/** 100,000 aggregates whose head backs off (a target is down); `tail` adds one event behind each. */
async function heldHeads(tail: 'none' | 'held back' | 'older relay') {
  await db.pool.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, retry_after, attempts)
     SELECT gen_random_uuid(), 'order', 'held-' || g, 'order.created', '{}', now() + interval '1 hour', 1
     FROM generate_series(1, $1) g`,
    [AGGREGATES],
  );
  if (tail === 'none') return;
  // An event held back behind its head: complete-batch writes no retry_after;
  // a relay before it wrote retry_after = now().
  await db.pool.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, retry_after, last_error)
     SELECT gen_random_uuid(), 'order', 'held-' || g, 'order.created', '{}',
            CASE WHEN $2 THEN now() END, 'held back behind an earlier event of its aggregate'
     FROM generate_series(1, $1) g`,
    [AGGREGATES, tail === 'older relay'],
  );
}

async function healthy(count: number, prefix = 'healthy-') {
  await db.pool.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
     SELECT gen_random_uuid(), 'order', $2 || g, 'order.created', '{}' FROM generate_series(1, $1) g`,
    [count, prefix],
  );
}

/** The baseline: an ordered claim of 100 from 1,000 aggregates with nothing held. */
let baseline = 0;

describe('every ordered claim shape costs a bounded multiple of a plain claim', () => {
  beforeAll(async () => {
    await db.pool.query('TRUNCATE outbox_events');
    await healthy(1_000);
    const plain = await measure();
    expect(plain.result.events).toHaveLength(100);
    baseline = plain.touched;
  });

  it('the plain claim pays nothing for parking: 100 of 1,000 free aggregates', () => {
    // 6,500 rows before parking existed and now; 9,600 while the parking
    // statements scanned the table on every claim, with nothing to park.
    expect(baseline).toBeLessThan(7_000);
  });

  it('heads only: 100,000 held heads, nothing to claim', async () => {
    await heldHeads('none');
    const { result, touched } = await measure();
    expect(result.events).toEqual([]);
    expect(touched).toBeLessThan(3 * baseline);
  });

  it.each(['held back', 'older relay'] as const)(
    'tails behind held heads (%s): the first claims park them, later ones cost what there is to claim',
    async (tail) => {
      await heldHeads(tail);
      const first = await measure();
      expect(first.result.events).toEqual([]);
      // Bounded even before anything is parked (was: a probe of each of the 100,000 aggregates).
      expect(first.touched).toBeLessThan(3 * baseline);
      await settle();
      const settled = await measure();
      expect(settled.result.events).toEqual([]);
      expect(settled.touched).toBeLessThan(3 * baseline);
    },
    120_000,
  );

  it('tails behind held heads and 500 healthy aggregates: a claim of 100 healthy heads', async () => {
    await heldHeads('held back');
    await healthy(500);
    expect((await measure()).touched).toBeLessThan(3 * baseline);
    await settle();
    const { result, touched } = await measure();
    expect(result.events).toHaveLength(100);
    expect(result.events.every((e) => e.aggregateId.startsWith('healthy-'))).toBe(true);
    expect(touched).toBeLessThan(3 * baseline);
  }, 120_000);

  it.each([false, true])(
    'a deep aggregate at the front (5,000 events), its head leased by another relay: %s',
    async (leased) => {
      await healthy(5_000, 'deep-'); // one aggregate's history, replayed: 5,000 events in front
      await db.pool.query(`UPDATE outbox_events SET aggregate_id = 'deep'`);
      await healthy(AGGREGATES);
      if (leased) {
        await db.pool.query(
          `UPDATE outbox_events SET locked_until = now() + interval '1 minute', locked_by = gen_random_uuid(),
                                    aggregate_id = 'other-relay'
           WHERE aggregate_id = 'deep'`,
        );
        // The other relay holds the deep aggregate's head; its rows are 'other-relay' from here on.
        await db.pool.query(
          `UPDATE outbox_events SET locked_until = NULL, locked_by = NULL
           WHERE aggregate_id = 'other-relay' AND seq > (SELECT min(seq) FROM outbox_events)`,
        );
      }
      const deep = leased ? 'other-relay' : 'deep';
      const first = await measure();
      expect(first.result.events).toHaveLength(100);
      expect(first.touched).toBeLessThan(3 * baseline);
      await settle();
      const { result, touched } = await measure();
      expect(result.events).toHaveLength(100);
      // One event of the deep aggregate at most (its head), and it first.
      const ofDeep = result.events.filter((e) => e.aggregateId === deep);
      expect(ofDeep.length).toBe(leased ? 0 : 1);
      expect(touched).toBeLessThan(3 * baseline);
      if (leased) {
        // Parked until the other relay's lease ends (a minute): a park is no
        // retry of its own, so it neither counts as backing off nor keeps an
        // elastic relay waiting for it.
        const { rows } = await db.pool.query(
          'SELECT count(*)::int AS n FROM outbox_events WHERE retry_after = parked_until AND parked_until > now()',
        );
        expect(rows[0].n).toBeGreaterThan(1_000);
        expect((await outboxStats(db.pool)).backingOff).toBe(0);
        expect(await retryDueWithin(db.pool, 120_000)).toBe(false);
      }
    },
    120_000,
  );
});
