import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { migrate } from '../lib/db/migrate.js';
import type { Queryable } from '../lib/db/queryable.js';
import { releaseWaiting } from '../lib/sql/release-waiting.js';
import { useTestDatabase } from './support/database.js';

const db = useTestDatabase();
const SCHEMA = 'outbox_release';
const TARGET = 'sqs:orders';

beforeAll(async () => {
  await migrate({ databaseUrl: db.url, schema: SCHEMA });
});

/** The real pool, counting the statements sent through it. */
function counting(pool: Queryable) {
  const statements: string[] = [];
  const db: Queryable = {
    query(text, values) {
      statements.push(text);
      return pool.query(text, values);
    },
  };
  return { db, statements };
}

/**
 * Rows released per transaction, largest first: a row's xmin is the
 * transaction that last wrote it, so each released row names the transaction
 * that released it.
 */
async function releasedPerTransaction(table: string): Promise<number[]> {
  const { rows } = await db.pool.query(
    `SELECT count(*)::int AS n FROM ${table}
     WHERE waiting_for IS NULL AND retry_after IS NULL
     GROUP BY xmin::text ORDER BY n DESC`,
  );
  return rows.map((r) => r.n);
}

/** `count` pending rows of `table`; `state` is SQL for their backoff, lease and waiting_for. */
async function rows(
  table: string,
  count: number,
  state: { waitingFor: string[] | null; retryInMs: number; leasedForMs?: number },
): Promise<void> {
  await db.pool.query(
    `INSERT INTO ${table} (id, aggregate_type, aggregate_id, event_type, payload, attempts,
                           retry_after, locked_until, waiting_for)
     SELECT gen_random_uuid(), 'order', 'o-' || g, 'order.created', '{}', 1,
            now() + make_interval(secs => $2::float8 / 1000),
            now() + make_interval(secs => $3::float8 / 1000),
            $4::text[]
     FROM generate_series(1, $1::int) g`,
    [count, state.retryInMs, state.leasedForMs ?? null, state.waitingFor],
  );
}

async function census(table: string) {
  const { rows } = await db.pool.query(
    `
    SELECT count(*) FILTER (WHERE waiting_for IS NULL AND retry_after IS NULL)::int AS released,
           count(*) FILTER (WHERE $1 = ANY (waiting_for))::int AS still_waiting,
           count(*)::int AS total
    FROM ${table}`,
    [TARGET],
  );
  return rows[0];
}

describe('releaseWaiting', () => {
  beforeEach(async () => {
    await db.pool.query(`TRUNCATE outbox_events, ${SCHEMA}.outbox_events`);
  });

  it('an outage backlog of 2,500 rows goes in bounded batches, one statement each, with the total returned', async () => {
    await rows('outbox_events', 1_000, { waitingFor: [TARGET], retryInMs: 600_000 });
    // Interleaved by seq with rows that must stay as they are.
    await rows('outbox_events', 300, { waitingFor: ['events:bus'], retryInMs: 600_000 });
    await rows('outbox_events', 200, { waitingFor: [TARGET], retryInMs: 600_000, leasedForMs: 60_000 });
    await rows('outbox_events', 1_500, { waitingFor: [TARGET, 'events:bus'], retryInMs: 600_000 });

    const { db: counted, statements } = counting(db.pool);
    const released = await releaseWaiting(counted, TARGET, undefined, { batchSize: 1_000 });

    expect(released).toBe(2_500);
    expect(statements.length).toBeGreaterThanOrEqual(3);
    expect(await releasedPerTransaction('outbox_events')).toEqual([1_000, 1_000, 500]);
    expect(await census('outbox_events')).toEqual({ released: 2_500, still_waiting: 200, total: 3_000 });
  });

  it('the default batch is bounded too: 12,000 waiting rows are never one statement', async () => {
    await rows('outbox_events', 12_000, { waitingFor: [TARGET], retryInMs: 600_000 });
    const { db: counted, statements } = counting(db.pool);

    expect(await releaseWaiting(counted, TARGET)).toBe(12_000);
    expect(statements.length).toBeGreaterThan(1);
    const perTransaction = await releasedPerTransaction('outbox_events');
    expect(perTransaction.length).toBeGreaterThan(1);
    expect(Math.max(...perTransaction)).toBeLessThanOrEqual(5_000);
    expect(await census('outbox_events')).toMatchObject({ released: 12_000, still_waiting: 0 });
  });

  it('starts no batch after its deadline: the rest wait out their hold', async () => {
    await rows('outbox_events', 3_000, { waitingFor: [TARGET], retryInMs: 600_000 });
    const { db: counted, statements } = counting(db.pool);
    // Time for the first batch only.
    let first = true;
    const slow: Queryable = {
      query: (async (text: string, values?: unknown[]) => {
        const result = await counted.query(text, values);
        if (first) {
          first = false;
          await new Promise((r) => setTimeout(r, 300));
        }
        return result;
      }) as Queryable['query'],
    };
    const released = await releaseWaiting(slow, TARGET, undefined, {
      batchSize: 1_000,
      until: performance.now() + 200,
    });
    expect(released).toBe(1_000);
    expect(statements).toHaveLength(1);
    expect(await census('outbox_events')).toMatchObject({ released: 1_000, still_waiting: 2_000 });
    // Past the deadline already: nothing.
    expect(await releaseWaiting(db.pool, TARGET, undefined, { until: performance.now() - 1 })).toBe(0);
  });

  it('in a schema: only that schema’s rows, and nothing when none wait', async () => {
    await rows(`${SCHEMA}.outbox_events`, 250, { waitingFor: [TARGET], retryInMs: 600_000 });
    await rows('outbox_events', 40, { waitingFor: [TARGET], retryInMs: 600_000 });

    expect(await releaseWaiting(db.pool, TARGET, SCHEMA, { batchSize: 100 })).toBe(250);
    expect(await census(`${SCHEMA}.outbox_events`)).toMatchObject({ released: 250, still_waiting: 0 });
    expect(await census('outbox_events')).toMatchObject({ released: 0, still_waiting: 40 });
    expect(await releaseWaiting(db.pool, TARGET, SCHEMA, { batchSize: 100 })).toBe(0);
  });
});
