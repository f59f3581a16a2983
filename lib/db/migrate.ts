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
  const dir = options.dir ?? MIGRATIONS_DIR;
  const { runner } = await importOptional('node-pg-migrate', 'migrate()', () => import('node-pg-migrate'));
  const files = await migrationFiles(dir);
  const client = new pg.Client({ connectionString: options.databaseUrl });
  await client.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_ID]);
    try {
      // Under the lock, before anything is created: refuse a database this
      // run would fail in, or (worse) whose own tables it would write into.
      const before = await inspect(client, schema);
      checkHistory(before, files);
      await refuseConflicts(client, before, files, dir);
      const log = options.log ?? (() => {});
      try {
        const ran = await runner({
          dbClient: client,
          dir,
          direction: 'up',
          migrationsTable: MIGRATIONS_TABLE,
          ...(schema === undefined ? {} : { schema, createSchema: true }),
          // Checked above, where a withdrawn migration in the history is no disorder.
          checkOrder: false,
          singleTransaction: true,
          logger: { debug: () => {}, info: log, warn: log, error: log },
        });
        return ran.map((m) => m.name);
      } catch (error) {
        await leaveNothingBehind(client, before);
        throw error;
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_ID]);
    }
  } finally {
    await client.end();
  }
}

/** node-pg-migrate's bookkeeping table: the migrations it applied, in order. */
const MIGRATIONS_TABLE = 'outbox_migrations';

/**
 * Migrations that shipped once and were withdrawn. `1764460800002_example-orders`
 * created the reference stack's example tables up to version 0.1.0 (and was
 * empty after): a history that lists it is still in order, and a new
 * database never gets it.
 */
const WITHDRAWN_MIGRATIONS: ReadonlySet<string> = new Set(['1764460800002_example-orders']);

/** The migration names in a folder, in order (numbered `.sql` files). */
async function migrationFiles(dir: string): Promise<string[]> {
  return (await readdir(dir))
    .filter((f) => f.endsWith('.sql'))
    .sort()
    .map((f) => f.slice(0, -'.sql'.length));
}

/** What the database holds before a run: where the tables go and what was applied there. */
interface DatabaseState {
  /** The schema the migrations create their tables in. */
  tableSchema: string;
  /** The schema of `outbox_migrations` (node-pg-migrate's: `public` without `schema`). */
  historySchema: string;
  schemaExisted: boolean;
  /** The applied migrations, in the order they ran; undefined: no `outbox_migrations` table. */
  history: string[] | undefined;
}

async function inspect(client: pg.Client, schema: string | undefined): Promise<DatabaseState> {
  const { rows } = await client.query<{ current: string | null; exists: boolean; history: string | null }>(
    `SELECT current_schema() AS current,
            EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS exists,
            to_regclass(format('%I.%I', $2::text, $3::text))::text AS history`,
    [schema ?? '', schema ?? 'public', MIGRATIONS_TABLE],
  );
  const row = rows[0]!;
  const state: DatabaseState = {
    tableSchema: schema ?? row.current ?? 'public',
    historySchema: schema ?? 'public',
    schemaExisted: schema === undefined || row.exists,
    history: undefined,
  };
  if (row.history !== null) {
    const applied = await client.query<{ name: string }>(
      `SELECT name FROM ${quoteIdentifier(state.historySchema)}.${MIGRATIONS_TABLE} ORDER BY run_on, id`,
    );
    state.history = applied.rows.map((r) => r.name);
  }
  return state;
}

/** The applied migrations must be this version's first ones, in its order (withdrawn ones aside). */
function checkHistory(state: DatabaseState, files: readonly string[]): void {
  const applied = (state.history ?? []).filter((name) => !WITHDRAWN_MIGRATIONS.has(name));
  applied.forEach((name, i) => {
    if (name === files[i]) return;
    const table = `${state.historySchema}.${MIGRATIONS_TABLE}`;
    throw new Error(
      files.includes(name)
        ? `${table} has ${name} applied before ${files[i]}, which this version of pg-lambda-outbox applies first; nothing was changed`
        : `${table} has ${name} applied, which this version of pg-lambda-outbox does not know (was the database migrated by a newer version?); nothing was changed`,
    );
  });
}

/** Tables and views a migration's up part creates, by name. */
function createdRelations(sql: string): string[] {
  const create =
    /\bCREATE\s+(?:UNLOGGED\s+)?(?:TABLE|VIEW|MATERIALIZED\s+VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_$]*)/gi;
  return [...upMigration(sql).matchAll(create)].map((m) => (m[1] as string).toLowerCase());
}

/**
 * Refuses to run when a migration still to apply would create a table or
 * view that is already in the target schema and that no applied migration
 * created: a service's own `outbox_events` (or `processed_events`). Running
 * anyway fails half-way (`relation "outbox_events" already exists`) or, where
 * a migration says IF NOT EXISTS, writes the outbox's indexes and triggers
 * into the service's table.
 */
async function refuseConflicts(
  client: pg.Client,
  state: DatabaseState,
  files: readonly string[],
  dir: string,
): Promise<void> {
  const applied = new Set(state.history ?? []);
  const ours = new Set<string>();
  const pending = new Set<string>();
  for (const name of files) {
    const names = createdRelations(await readFile(`${dir}/${name}.sql`, 'utf8'));
    for (const relation of names) (applied.has(name) ? ours : pending).add(relation);
  }
  const candidates = [...pending].filter((r) => !ours.has(r));
  if (candidates.length === 0) return;
  const { rows } = await client.query<{ relname: string; columns: string[] }>(
    `SELECT c.relname,
            array(SELECT attname FROM pg_attribute WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped)::text[] AS columns
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1 AND c.relname = ANY($2::text[])
     ORDER BY c.relname`,
    [state.tableSchema, candidates],
  );
  if (rows.length === 0) return;
  const where = state.tableSchema;
  const names = rows.map((r) => r.relname).join(', ');
  const history =
    state.history === undefined
      ? `there is no ${state.historySchema}.${MIGRATIONS_TABLE}`
      : `${state.historySchema}.${MIGRATIONS_TABLE} does not record creating them`;
  const events = rows.find((r) => r.relname === 'outbox_events');
  // The outbox's own table, created from `pg-lambda-outbox sql` by another migration tool?
  const looksOurs = events !== undefined && OUTBOX_COLUMNS.every((c) => events.columns.includes(c));
  const hint = looksOurs
    ? ` If they are the outbox's own tables, applied with your own migration tool from \`pg-lambda-outbox sql\`, keep applying new migrations that way (\`sql --after <the last one applied>\`).`
    : '';
  throw new ConfigError(
    'schema',
    `${where} already has ${names}, which migrate() did not create (${history}); nothing was changed. ` +
      `Give the outbox a schema of its own: pg-lambda-outbox migrate --schema <name> (migrate({ schema }) in code), ` +
      `and the same schema to every part (OUTBOX_SCHEMA=<name>).${hint}`,
  );
}

/** Columns only the outbox's `outbox_events` has together. */
const OUTBOX_COLUMNS = ['aggregate_type', 'aggregate_id', 'event_type', 'locked_until', 'dead_lettered_at'];

/**
 * After a failed run: the migrations were rolled back (one transaction), but
 * node-pg-migrate creates its history table, and the schema, before that
 * transaction. Dropped again when this run created them, so a failed run
 * leaves the database as it found it.
 */
async function leaveNothingBehind(client: pg.Client, before: DatabaseState): Promise<void> {
  try {
    if (before.history === undefined) {
      await client.query(`DROP TABLE IF EXISTS ${quoteIdentifier(before.historySchema)}.${MIGRATIONS_TABLE}`);
    }
    if (!before.schemaExisted) {
      // RESTRICT: only when empty, i.e. nothing but what this run made.
      await client.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(before.tableSchema)} RESTRICT`);
    }
  } catch {
    // The run's own error is the one to report.
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
  const names = await migrationFiles(dir);
  let start = 0;
  if (options.after !== undefined) {
    const after = options.after;
    // A withdrawn migration was applied where it sorts: what follows it is new.
    const index = WITHDRAWN_MIGRATIONS.has(after)
      ? names.filter((name) => name < after).length - 1
      : names.indexOf(after);
    if (index < 0 && !WITHDRAWN_MIGRATIONS.has(after)) {
      throw new ConfigError(
        'after',
        `no migration named ${JSON.stringify(options.after)}; known: ${names.join(', ')}`,
      );
    }
    start = index + 1;
  }
  const result: MigrationSql[] = [];
  for (const name of names.slice(start)) {
    const text = await readFile(`${dir}/${name}.sql`, 'utf8');
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
