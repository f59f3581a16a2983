import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { migrate } from '../../lib/db/migrate.js';
import { migrateExample } from '../../scripts/local/example-schema.js';
import { dropDatabase, ensureDatabase } from '../../scripts/local/postgres.js';

export interface TestDatabase {
  url: string;
  pool: pg.Pool;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

/** A fresh database name, unique to this test file run. */
export function testDatabaseName(): string {
  return `outbox_test_${randomBytes(6).toString('hex')}`;
}

/**
 * Creates an empty database of its own for one test file and (unless told not
 * to) applies the migrations and the reference stack's example tables, so
 * test files never see each other's rows.
 */
export async function createTestDatabase(
  options: { migrate?: boolean; poolSize?: number } = {},
): Promise<TestDatabase> {
  const adminUrl = inject('adminDatabaseUrl');
  const name = testDatabaseName();
  const url = await ensureDatabase(adminUrl, name);
  if (options.migrate ?? true) {
    await migrate({ databaseUrl: url });
    // The reference stack's example tables (orders, order_notifications).
    await migrateExample(url);
  }
  const pool = new pg.Pool({ connectionString: url, max: options.poolSize ?? 10 });
  return {
    url,
    pool,
    drop: async () => {
      // pool.end() resolves before its connections have finished closing; wait
      // for them, or DROP ... WITH (FORCE) may kill one mid-close and its
      // error would surface as an uncaught exception.
      let open = pool.totalCount;
      const closed = new Promise<void>((resolve) => {
        if (open === 0) resolve();
        pool.on('remove', () => {
          if (--open === 0) resolve();
        });
      });
      await pool.end();
      await closed;
      await dropDatabase(adminUrl, name);
    },
  };
}

/**
 * Gives the calling test file its own migrated database for all its tests:
 * created before the first test, dropped after the last. The returned handle
 * is filled in by the time tests (and later `beforeAll` hooks) run.
 */
export function useTestDatabase(options: { migrate?: boolean; poolSize?: number } = {}): TestDatabase {
  const handle = {} as TestDatabase;
  beforeAll(async () => {
    Object.assign(handle, await createTestDatabase(options));
  });
  afterAll(async () => {
    await handle.drop?.();
  });
  return handle;
}
