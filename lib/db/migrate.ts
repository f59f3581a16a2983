import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import type { Queryable } from './queryable.js';

/** The folder of numbered `.sql` migrations shipped with the project. */
export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations', import.meta.url));

/** node-pg-migrate's well-known advisory lock id, shared by all its instances. */
const MIGRATION_LOCK_ID = '7241865325823964';

export interface MigrateOptions {
  /** Connection string of the database to migrate. */
  databaseUrl: string;
  /** Folder of migrations; defaults to the project's `migrations/`. */
  dir?: string;
  /** Log lines from the migration library; silent by default. */
  log?: (message: string) => void;
}

/**
 * Applies all pending migrations with node-pg-migrate and returns the names of
 * those it ran.
 *
 * node-pg-migrate refuses to start while another migrator holds its lock
 * ("Another migration is already running"). Several Lambdas or test workers
 * starting at once should instead queue up, so this waits for the same
 * advisory lock first (the lock is re-entrant within one session, so the
 * library's own try-lock then succeeds) and runs the migrations once it is its
 * turn: the second process finds nothing left to do.
 */
export async function migrate(options: MigrateOptions): Promise<string[]> {
  const client = new pg.Client({ connectionString: options.databaseUrl });
  await client.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_ID]);
    try {
      const log = options.log ?? (() => {});
      const ran = await runner({
        dbClient: client,
        dir: options.dir ?? MIGRATIONS_DIR,
        direction: 'up',
        migrationsTable: 'outbox_migrations',
        checkOrder: true,
        singleTransaction: true,
        logger: { debug: () => {}, info: log, warn: log, error: log },
      });
      return ran.map((m) => m.name);
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_ID]);
    }
  } finally {
    await client.end();
  }
}

/**
 * Turns the statement-level NOTIFY trigger on `outbox_events` on or off. Relays
 * that LISTEN wake as soon as a producer commits; behind RDS Proxy (where
 * LISTEN pins connections) leave it off and rely on polling.
 */
export async function setNotifyTrigger(client: Queryable, enabled: boolean): Promise<void> {
  await client.query(
    `ALTER TABLE outbox_events ${enabled ? 'ENABLE' : 'DISABLE'} TRIGGER outbox_events_notify`,
  );
}
