import { randomUUID } from 'node:crypto';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Queryable } from '../lib/db/queryable.js';
import { type ClaimParams, claimBatch } from '../lib/sql/claim-batch.js';
import { useTestDatabase } from './support/database.js';
import { type PlanNode, rowsTouched } from './support/plan.js';

const db = useTestDatabase();

beforeAll(async () => {
  // "Fresh": never analyzed, whatever the test takes. This database is ours alone.
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

/** `count` rows, aggregate `order-(g % aggregates)`, seq order = g order. */
async function fill(count: number, aggregates: number, prefix = 'order-') {
  await db.pool.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
     SELECT gen_random_uuid(), 'order', $3 || (g % $2), 'order.created', jsonb_build_object('g', g)
     FROM generate_series(0, $1 - 1) g`,
    [count, aggregates, prefix],
  );
}

/** Runs the claim and, in a transaction rolled back afterwards, EXPLAIN ANALYZE of the same statement. */
async function claimWithPlan(p: ClaimParams) {
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
    const started = performance.now();
    const result = await claimBatch(recording, p);
    const ms = performance.now() - started;
    await client.query('ROLLBACK');
    await client.query('BEGIN');
    const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
    await client.query('ROLLBACK');
    const plan = rows[0]['QUERY PLAN'][0].Plan as PlanNode;
    return { result, ms, touched: rowsTouched(plan), plan };
  } finally {
    client.release();
  }
}

async function neverAnalyzed(): Promise<boolean> {
  const { rows } = await db.pool.query(
    `SELECT last_analyze IS NULL AND last_autoanalyze IS NULL AS fresh
     FROM pg_stat_user_tables WHERE relname = 'outbox_events'`,
  );
  return rows[0].fresh;
}

describe('ordered claim', () => {
  it('fresh table, 20,000 pending rows of 200 aggregates: the oldest head of each aggregate, without walking the backlog', async () => {
    await fill(20_000, 200);
    expect(await neverAnalyzed()).toBe(true);
    const { result, touched, ms } = await claimWithPlan(params());
    // Rows 0..199 are the 200 heads; the oldest 100 of them are claimed.
    expect(result.events.map((e) => (e.payload as { g: number }).g)).toEqual(
      Array.from({ length: 100 }, (_, g) => g),
    );
    expect(new Set(result.events.map((e) => e.aggregateId)).size).toBe(100);
    // The work is bounded by the batch (a walk of 2 × 100 rows and a probe
    // each), not by the backlog: the anti-join this replaces touched millions.
    expect(touched).toBeLessThan(8_000);
    expect(ms).toBeLessThan(2_000); // generous: the claim this replaces took seconds here
  });

  it('a blocked aggregate with a long tail does not stop the others, and the claim does not walk its tail', async () => {
    // 50,000 events of "blocked" first (its head backs off), then 20 aggregates × 3.
    await fill(50_000, 1, 'blocked-');
    await db.pool.query(
      `UPDATE outbox_events SET retry_after = now() + interval '1 hour'
       WHERE seq = (SELECT min(seq) FROM outbox_events)`,
    );
    await fill(60, 20);
    const first = await claimWithPlan(params());
    expect(first.result.events).toHaveLength(20);
    expect(first.result.events.every((e) => e.aggregateId.startsWith('order-'))).toBe(true);
    // Bounded by the walk (2 × 100 rows) and one probe per aggregate, not by the 50,000-row tail.
    expect(first.touched).toBeLessThan(8_000);

    // The same through the real statement, committed: leased heads hold their aggregates.
    const claimed = await claimBatch(db.pool, params());
    expect(claimed.events.map((e) => (e.payload as { g: number }).g)).toEqual(
      Array.from({ length: 20 }, (_, g) => g),
    );
    expect((await claimBatch(db.pool, params())).events).toEqual([]);
    // Their outcomes recorded: the next events of the 20 aggregates are the heads now.
    await db.pool.query(
      `UPDATE outbox_events SET processed_at = now(), locked_until = NULL, locked_by = NULL
       WHERE id = ANY($1::uuid[])`,
      [claimed.events.map((e) => e.id)],
    );
    const next = await claimBatch(db.pool, params());
    expect(next.events.map((e) => (e.payload as { g: number }).g)).toEqual(
      Array.from({ length: 20 }, (_, g) => g + 20),
    );
  });

  it.each([false, true])(
    '100,000 held aggregates (heads backing off, analyzed: %s): an empty claim costs what there is to claim, and new aggregates behind them are found',
    async (analyzed) => {
      await fill(100_000, 100_000, 'held-');
      // Every head waits for a target that is down.
      await db.pool.query(`UPDATE outbox_events SET retry_after = now() + interval '1 hour', attempts = 1`);
      if (analyzed) await db.pool.query('ANALYZE outbox_events');
      else expect(await neverAnalyzed()).toBe(true);
      const empty = await claimWithPlan(params());
      expect(empty.result.events).toEqual([]);
      // Before: one probe per held aggregate (100,000 and more rows touched, 1.2 s).
      expect(empty.touched).toBeLessThan(2_000);

      await fill(30, 30, 'new-');
      const found = await claimWithPlan(params());
      expect(found.result.events.map((e) => e.aggregateId).sort()).toEqual(
        Array.from({ length: 30 }, (_, i) => `new-${i}`).sort(),
      );
      expect(found.touched).toBeLessThan(5_000);
      // A held head whose wait is over is claimable again, through the due part.
      await db.pool.query(
        `UPDATE outbox_events SET retry_after = now() - interval '1 second' WHERE aggregate_id IN ('held-7', 'held-99999')`,
      );
      const due = await claimWithPlan(params());
      expect(due.result.events.map((e) => e.aggregateId).sort()).toEqual(
        ['held-7', 'held-99999', ...Array.from({ length: 30 }, (_, i) => `new-${i}`)].sort(),
      );
      expect(due.touched).toBeLessThan(5_000);
    },
    60_000,
  );

  it('heads found in the first rows and heads found only past a blocked tail are claimed oldest first', async () => {
    await fill(10, 10, 'early-'); // g 0..9: ten heads at the front
    await fill(1_000, 1, 'blocked-'); // then a blocked aggregate's 1,000 rows
    await db.pool.query(
      `UPDATE outbox_events SET locked_until = now() + interval '1 minute', locked_by = gen_random_uuid()
       WHERE aggregate_id = 'blocked-0' AND payload->>'g' = '0'`,
    );
    await fill(300, 300, 'late-'); // then 300 more aggregates, one event each
    const { events } = await claimBatch(db.pool, params());
    const names = events.map((e) => e.aggregateId);
    expect(names.slice(0, 10)).toEqual(Array.from({ length: 10 }, (_, i) => `early-${i}`));
    expect(names.slice(10)).toEqual(Array.from({ length: 90 }, (_, i) => `late-${i}`));
  });

  it('dead letters: block holds the aggregate, skip lets the next event pass; discarding releases it', async () => {
    // a: [dead, a1, a2]; b: [b0]
    await db.pool.query(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, dead_lettered_at)
       VALUES (gen_random_uuid(), 'order', 'a', 'order.created', '{"n":"a0"}', now()),
              (gen_random_uuid(), 'order', 'a', 'order.created', '{"n":"a1"}', NULL),
              (gen_random_uuid(), 'order', 'a', 'order.created', '{"n":"a2"}', NULL),
              (gen_random_uuid(), 'order', 'b', 'order.created', '{"n":"b0"}', NULL)`,
    );
    const names = async (p: ClaimParams) => {
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        const { events } = await claimBatch(client, p);
        return events.map((e) => (e.payload as { n: string }).n);
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
    };
    expect(await names(params())).toEqual(['b0']); // block is the default
    expect(await names(params({ deadLetterPolicy: 'block' }))).toEqual(['b0']);
    expect(await names(params({ deadLetterPolicy: 'skip' }))).toEqual(['a1', 'b0']);
    expect(await names(params({ ordered: false }))).toEqual(['a1', 'a2', 'b0']);

    await db.pool.query(
      `UPDATE outbox_events SET processed_at = now(), discarded_at = now(), dead_lettered_at = NULL
       WHERE dead_lettered_at IS NOT NULL`,
    );
    expect(await names(params())).toEqual(['a1', 'b0']);
  });

  it('keeps the claim rules: attempts counted, lease set, exhausted heads dead-lettered by the claim', async () => {
    await fill(4, 2);
    // g 0 lost its last lease while claimed alone, on its last attempt: it keeps killing the relay.
    await db.pool.query(
      `UPDATE outbox_events SET attempts = 3, locked_by = gen_random_uuid(), claimed_alone = true,
                                locked_until = now() - interval '1 second'
       WHERE payload->>'g' = '0'`,
    );
    // An orphan among the heads is claimed alone: here it is dead-lettered, and nothing else is taken.
    const isolated = await claimBatch(db.pool, params({ maxAttempts: 3 }));
    expect(isolated.exhausted.map((e) => e.aggregateId)).toEqual(['order-0']);
    expect(isolated.events).toEqual([]);
    const leaseId = randomUUID();
    const claim = await claimBatch(db.pool, params({ maxAttempts: 3, leaseId }));
    expect(claim.exhausted).toEqual([]);
    expect(claim.events.map((e) => [e.aggregateId, e.attempts])).toEqual([['order-1', 1]]);
    expect(claim.events[0]?.payloadJson).toBe('{"g": 1}');
    const { rows } = await db.pool.query(
      `SELECT payload->>'g' AS g, locked_by, locked_until > now() AS leased, dead_lettered_at IS NOT NULL AS dead
       FROM outbox_events ORDER BY seq`,
    );
    expect(rows).toEqual([
      { g: '0', locked_by: null, leased: null, dead: true },
      { g: '1', locked_by: leaseId, leased: true, dead: false },
      { g: '2', locked_by: null, leased: null, dead: false },
      { g: '3', locked_by: null, leased: null, dead: false },
    ]);
    // With block, order-0's dead letter now holds it: its next event (g=2) is not claimable.
    expect((await claimBatch(db.pool, params())).events).toEqual([]);
  });
});
