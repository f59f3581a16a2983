import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { ConfigError } from '../errors.js';
import { importOptional } from '../optional-dependency.js';
import type { Queryable } from './queryable.js';
import { quoteIdentifier, validateSchemaName } from './schema.js';

/** The folder of numbered `.sql` migrations shipped with the package: the outbox's own tables only. */
export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations', import.meta.url));

/** node-pg-migrate's well-known advisory lock id, shared by all its instances. */
const MIGRATION_LOCK_ID = '7241865325823964';

export interface MigrateOptions {
  /** Connection string of the database to migrate. */
  databaseUrl: string;
  /**
   * The schema to create the outbox tables in (created if missing), with the
   * migrations' own bookkeeping table (`outbox_migrations`) beside them.
   * Default: none, the tables go where the connection's `search_path` puts
   * them (`public` usually), as before this option existed. Give the same
   * schema to the write API, relay, consumer and operations (`schema`
   * option, `OUTBOX_SCHEMA`).
   */
  schema?: string | undefined;
  /** Folder of migrations; defaults to the package's `migrations/`. */
  dir?: string;
  /** Log lines from the migration library; silent by default. */
  log?: (message: string) => void;
}

/**
 * Applies all pending migrations with node-pg-migrate (an optional peer
 * dependency: `npm i node-pg-migrate`) and returns the names of those it ran.
 *
 * node-pg-migrate refuses to start while another migrator holds its lock
 * ("Another migration is already running"). Several Lambdas or test workers
 * starting at once should instead queue up, so this waits for the same
 * advisory lock first (the lock is re-entrant within one session, so the
 * library's own try-lock then succeeds) and runs the migrations once it is its
 * turn: the second process finds nothing left to do.
 *
 * With `schema`, the migrations run with `search_path` set to that schema
 * alone, so every table, index, view and function they create lands there
 * and nothing outside it is read or touched.
 */
export async function migrate(options: MigrateOptions): Promise<string[]> {
  const schema = validateSchemaName(options.schema);
  const { runner } = await importOptional('node-pg-migrate', 'migrate()', () => import('node-pg-migrate'));
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
        ...(schema === undefined ? {} : { schema, createSchema: true }),
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

export interface MigrationSqlOptions {
  /** As for {@link migrate}: the schema the tables go into; default none (the session's `search_path`). */
  schema?: string | undefined;
  /** Only the migrations after this one (the last one your own migration tool has applied). */
  after?: string | undefined;
  /** Folder of migrations; defaults to the package's `migrations/`. */
  dir?: string;
}

/** One migration as SQL a team's own migration tool can apply. */
export interface MigrationSql {
  /** The migration's name, e.g. `1764460800000_outbox-events`: order and identity. */
  name: string;
  /** Its up migration, ready to run (with the schema set around it when one is given). */
  sql: string;
}

/**
 * The SQL of each migration, in order, for teams whose schema changes go
 * through their own tool (Flyway, Prisma Migrate, drizzle-kit, Knex,
 * Sequelize) instead of {@link migrate}: add each one as a migration of
 * yours, once. On an upgrade of the package, `after` gives only the new ones.
 *
 * With `schema`, each migration creates the schema if missing, points
 * `search_path` at it for its own statements and then restores the session's
 * `search_path` as it was (kept in the custom setting
 * `pg_lambda_outbox.search_path`), so the tool's later statements in the same
 * session are not affected.
 */
export async function migrationSql(options: MigrationSqlOptions = {}): Promise<MigrationSql[]> {
  const schema = validateSchemaName(options.schema);
  const dir = options.dir ?? MIGRATIONS_DIR;
  const files = (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  const names = files.map((f) => f.slice(0, -'.sql'.length));
  let start = 0;
  if (options.after !== undefined) {
    const index = names.indexOf(options.after);
    if (index < 0) {
      throw new ConfigError(
        'after',
        `no migration named ${JSON.stringify(options.after)}; known: ${names.join(', ')}`,
      );
    }
    start = index + 1;
  }
  const result: MigrationSql[] = [];
  for (let i = start; i < files.length; i++) {
    const name = names[i] as string;
    const text = await readFile(`${dir}/${files[i]}`, 'utf8');
    const up = upMigration(text).trim();
    const header = `-- pg-lambda-outbox migration ${name}${schema === undefined ? '' : ` (schema ${quoteIdentifier(schema)})`}\n`;
    if (schema === undefined) {
      result.push({ name, sql: `${header}\n${up}\n` });
      continue;
    }
    const quoted = quoteIdentifier(schema);
    result.push({
      name,
      sql: `${header}CREATE SCHEMA IF NOT EXISTS ${quoted};
SELECT set_config('pg_lambda_outbox.search_path', current_setting('search_path'), false);
SET search_path TO ${quoted};

${up}

SELECT set_config('search_path', current_setting('pg_lambda_outbox.search_path'), false);
`,
    });
  }
  return result;
}

/** The part of a node-pg-migrate SQL file between `-- Up Migration` and `-- Down Migration`. */
function upMigration(text: string): string {
  const up = text.search(/^\s*--\s*up migration/im);
  const down = text.search(/^\s*--\s*down migration/im);
  const start = up < 0 ? 0 : text.indexOf('\n', up) + 1;
  return text.slice(start, down < 0 ? undefined : down);
}

/**
 * Turns the statement-level NOTIFY trigger on `outbox_events` on or off. Relays
 * that LISTEN wake as soon as a producer commits; behind RDS Proxy (where
 * LISTEN pins connections) leave it off and rely on polling.
 */
export async function setNotifyTrigger(
  client: Queryable,
  enabled: boolean,
  options: { schema?: string | undefined } = {},
): Promise<void> {
  const schema = validateSchemaName(options.schema);
  const table = schema === undefined ? 'outbox_events' : `${quoteIdentifier(schema)}.outbox_events`;
  await client.query(`ALTER TABLE ${table} ${enabled ? 'ENABLE' : 'DISABLE'} TRIGGER outbox_events_notify`);
}
