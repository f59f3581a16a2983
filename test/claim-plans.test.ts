import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { preferGenericPlans } from '../lib/db/queryable.js';
import { claimBatch } from '../lib/sql/claim-batch.js';
import { useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';

const db = useTestDatabase();

/** Three ordered claims on one connection (rolled back), then how that connection planned them. */
async function plans(pool: pg.Pool) {
  const client = await pool.connect();
  try {
    for (let i = 0; i < 3; i++) {
      await client.query('BEGIN');
      await claimBatch(client, {
        limit: 100,
        leaseMs: 60_000,
        leaseId: randomUUID(),
        maxAttempts: 20,
        ordered: true,
        perAggregate: 10,
      });
      await client.query('ROLLBACK');
    }
    const { rows } = await client.query(
      `SELECT generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements
       WHERE name LIKE 'outbox\\_%'`,
    );
    return rows;
  } finally {
    client.release();
    await pool.end();
  }
}

describe('the claim as a prepared statement', () => {
  it('is prepared once per connection; a relay pool (preferGenericPlans) runs its generic plan from the first claim', async () => {
    await insertEvents(db.pool, 50);
    // Left to PostgreSQL: the first five runs are planned each time (custom plans).
    expect(await plans(new pg.Pool({ connectionString: db.url, max: 1 }))).toEqual([
      { generic: 0, custom: 3 },
    ]);
    const relayPool = preferGenericPlans(new pg.Pool({ connectionString: db.url, max: 1 }));
    expect(await plans(relayPool)).toEqual([{ generic: 3, custom: 0 }]);
  });

  it('a relay pool sets the plan mode before a connection is handed out, never beside its first query', async () => {
    // Two queries at once on one connection: pg 8 queues the second with a
    // deprecation warning, pg 9 refuses it.
    let inFlight = 0;
    let most = 0;
    class Counting extends pg.Client {
      override query(...args: unknown[]): never {
        inFlight++;
        most = Math.max(most, inFlight);
        const done = () => {
          inFlight--;
        };
        const result = (super.query as (...a: unknown[]) => unknown)(...args);
        if (result instanceof Promise) result.then(done, done);
        else done();
        return result as never;
      }
    }
    const pool = preferGenericPlans(new pg.Pool({ connectionString: db.url, max: 1, Client: Counting }));
    try {
      const { rows } = await pool.query('SHOW plan_cache_mode');
      expect(rows[0].plan_cache_mode).toBe('force_generic_plan');
      expect(most).toBe(1);
    } finally {
      await pool.end();
    }
  });
});
