import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';
import pg from 'pg';

/**
 * The reference stack's example domain (orders, order_notifications): kept
 * here, out of the package's `migrations/`, so that `migrate()` in a
 * service's database creates the outbox's tables only and its history never
 * lists an example migration.
 */
export const EXAMPLE_MIGRATIONS_DIR = fileURLToPath(new URL('./example-migrations', import.meta.url));

/** node-pg-migrate's advisory lock id: waited for, so processes starting at once take turns. */
const MIGRATION_LOCK_ID = '7241865325823964';

/**
 * Creates the example domain's tables for `npm start` and the tests, with a
 * bookkeeping table of its own (`example_migrations`), beside the outbox's
 * `migrate()`. Idempotent, and safe from several processes at once.
 */
export async function migrateExample(databaseUrl: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_ID]);
    const silent = () => {};
    const ran = await runner({
      dbClient: client,
      dir: EXAMPLE_MIGRATIONS_DIR,
      direction: 'up',
      migrationsTable: 'example_migrations',
      checkOrder: true,
      singleTransaction: true,
      logger: { debug: silent, info: silent, warn: silent, error: silent },
    });
    return ran.map((m) => m.name);
  } finally {
    await client.end();
  }
}
