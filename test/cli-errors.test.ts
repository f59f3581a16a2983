import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { program } from '../lib/cli/program.js';
import { databaseUrl } from '../lib/cli/shared.js';
import { databaseConfig } from '../lib/db/connection-config.js';
import { MIGRATIONS_DIR, migrate, migrationSql } from '../lib/db/migrate.js';
import { type CliRun, runCli } from './support/cli.js';
import { createTestDatabase, useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';

/**
 * Errors that name their cause (issue 35): migrate refuses a schema that
 * holds tables of the same names it did not create, before anything runs;
 * a malformed DATABASE_URL is named as such; messages speak in flags; an
 * unknown --id fails; --version; docs/cli.md lists every command.
 */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const db = useTestDatabase();

type Run = CliRun;

/** The CLI from source, as an operator runs it (test/support/cli.ts). */
const outbox = (args: string[], env: Record<string, string | undefined> = { DATABASE_URL: db.url }) =>
  runCli(args, env);

/** Failure output is one line on stderr, nothing on stdout. */
function expectOneLineError(run: Run, code: number, message: RegExp) {
  expect(run.stdout).toBe('');
  expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(run.stderr.trimEnd()).toMatch(message);
  expect(run.code).toBe(code);
}

async function relations(pool: pg.Pool, schema: string): Promise<string[]> {
  const { rows } = await pool.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1 AND c.relkind IN ('r', 'v') ORDER BY 1`,
    [schema],
  );
  return rows.map((r) => r.name);
}

async function schemaExists(pool: pg.Pool, schema: string): Promise<boolean> {
  const { rows } = await pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
  return rows.length === 1;
}

describe('migrate on a database with tables of its own', () => {
  it("refuses a schema holding the service's own outbox_events before running anything: exit 2, --schema named, no SQL on stdout, nothing left behind; --schema then works", async () => {
    const target = await createTestDatabase({ migrate: false });
    try {
      await target.pool.query(
        `CREATE TABLE outbox_events (id bigserial PRIMARY KEY, topic text NOT NULL, body jsonb);
         INSERT INTO outbox_events (topic) VALUES ('theirs');
         CREATE TABLE orders (id uuid PRIMARY KEY)`,
      );
      const env = { DATABASE_URL: target.url };
      const refused = await outbox(['migrate'], env);
      expectOneLineError(
        refused,
        2,
        /^error: schema: public already has outbox_events, which migrate\(\) did not create \(there is no public\.outbox_migrations\); nothing was changed\. .*migrate --schema <name>/,
      );
      expect(await relations(target.pool, 'public')).toEqual(['orders', 'outbox_events']);

      // The same through OUTBOX_SCHEMA, the default of --schema.
      const moved = await outbox(['migrate'], { ...env, OUTBOX_SCHEMA: 'outbox' });
      expect(moved.stderr).toBe('');
      expect(moved.code).toBe(0);
      expect(moved.stdout).toMatch(/^applied in schema outbox: 1764460800000_outbox-events, /);
      expect(moved.stdout.trimEnd().split('\n')).toHaveLength(1);
      expect(await relations(target.pool, 'outbox')).toContain('outbox_events');
      expect(await relations(target.pool, 'public')).toEqual(['orders', 'outbox_events']);
      const { rows } = await target.pool.query('SELECT topic FROM public.outbox_events');
      expect(rows).toEqual([{ topic: 'theirs' }]);
      // The example stack's migration is not the package's: not in a user's history.
      const history = await target.pool.query<{ name: string }>('SELECT name FROM outbox.outbox_migrations');
      expect(history.rows.map((r) => r.name).filter((n) => n.includes('example'))).toEqual([]);
    } finally {
      await target.drop();
    }
  });

  it('refuses a chosen schema that already holds a processed_events of its own, and keeps that schema', async () => {
    const target = await createTestDatabase({ migrate: false });
    try {
      await target.pool.query('CREATE SCHEMA shared; CREATE TABLE shared.processed_events (id int)');
      await expect(migrate({ databaseUrl: target.url, schema: 'shared' })).rejects.toThrow(
        /^schema: shared already has processed_events, which migrate\(\) did not create/,
      );
      expect(await relations(target.pool, 'shared')).toEqual(['processed_events']);
    } finally {
      await target.drop();
    }
  });

  it('a run that fails half-way drops the history table and the schema it created', async () => {
    const target = await createTestDatabase({ migrate: false });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-migrations-'));
    try {
      fs.copyFileSync(
        path.join(MIGRATIONS_DIR, '1764460800000_outbox-events.sql'),
        path.join(dir, '1764460800000_outbox-events.sql'),
      );
      fs.writeFileSync(
        path.join(dir, '1764460800001_broken.sql'),
        '-- Up Migration\nSELECT no_such_function();\n',
      );
      await expect(migrate({ databaseUrl: target.url, schema: 'fresh', dir })).rejects.toThrow(
        /no_such_function/,
      );
      expect(await schemaExists(target.pool, 'fresh')).toBe(false);
      await expect(migrate({ databaseUrl: target.url, dir })).rejects.toThrow(/no_such_function/);
      expect(await relations(target.pool, 'public')).toEqual([]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
      await target.drop();
    }
  });

  it('a history from an older version, with the withdrawn example migration, stays in order: nothing to do, sql --after it gives what follows', async () => {
    const target = await createTestDatabase({ migrate: false });
    try {
      await migrate({ databaseUrl: target.url });
      // Up to 0.1.0, 1764460800002_example-orders ran between the first migrations.
      await target.pool.query(
        `UPDATE outbox_migrations SET run_on = run_on + interval '1 second' WHERE name > '1764460800002';
         INSERT INTO outbox_migrations (name, run_on)
         SELECT '1764460800002_example-orders', run_on FROM outbox_migrations WHERE name = '1764460800001_processed-events'`,
      );
      await expect(migrate({ databaseUrl: target.url })).resolves.toEqual([]);
      const after = await migrationSql({ after: '1764460800002_example-orders' });
      expect(after[0]?.name).toBe('1764900000000_aggregate-locks');
    } finally {
      await target.drop();
    }
  });
});

describe('DATABASE_URL', () => {
  it('not a URL: named as a malformed DATABASE_URL, without showing the value, in the CLI and in databaseConfig', async () => {
    const [plain, secretish] = await Promise.all([
      outbox(['status'], { DATABASE_URL: 'not-a-url' }),
      outbox(['status'], { DATABASE_URL: 'alice:s3cr3t@db.internal/app' }),
    ]);
    expectOneLineError(
      plain,
      2,
      /^error: DATABASE_URL: is not a PostgreSQL connection URL: expected postgres:\/\//,
    );
    expectOneLineError(secretish, 2, /^error: DATABASE_URL: is not a PostgreSQL connection URL/);
    expect(secretish.stderr).not.toMatch(/s3cr3t|alice/);
    await expect(databaseConfig({ DATABASE_URL: 'host=db dbname=app password=x' })).rejects.toThrow(
      /^DATABASE_URL: is not a PostgreSQL connection URL: .*keyword=value strings .* are not supported/,
    );
    // What pg reads as a connection string passes.
    expect(databaseUrl({ DATABASE_URL: 'postgresql://u@h/d' })).toBe('postgresql://u@h/d');
    expect(databaseUrl({ DATABASE_URL: 'socket:/var/run/postgresql?db=app' })).toMatch(/^socket:/);
  });

  it('unset: the npm start hint only inside this repository', () => {
    expect(() => databaseUrl({}, true)).toThrow(/is not set; .*`npm start` prints the URL/);
    expect(() => databaseUrl({}, false)).toThrow(
      /^DATABASE_URL: is not set; point it at the outbox database, e.g\. DATABASE_URL=postgres:\/\/user:password@host:5432\/database npx pg-lambda-outbox status$/,
    );
  });
});

describe('the CLI speaks in flags', () => {
  it('redrive and replay without a filter list the flags; an unknown --id exits 2 and changes nothing', async () => {
    const dead = await insertEvents(db.pool, 2, (i) => ({ aggregateId: `dl-${i}` }));
    await db.pool.query(
      `UPDATE outbox_events SET attempts = 3, dead_lettered_at = now(), last_error = 'x' WHERE id = ANY($1::uuid[])`,
      [dead],
    );
    const pending = await insertEvents(db.pool, 1, () => ({ aggregateId: 'still-pending' }));
    const unknown = '00000000-0000-4000-8000-000000000000';
    const [noFilter, noReplayFilter, missing, notDead, window, badId, known] = await Promise.all([
      outbox(['redrive']),
      outbox(['replay']),
      outbox(['redrive', '--id', dead[0]!, '--id', unknown]),
      outbox(['discard', '--id', pending[0]!, '--dry-run']),
      outbox(['redrive', '--after', '2025-02-01T00:00:00Z', '--before', '2025-01-01T00:00:00Z']),
      outbox(['redrive', '--id', 'nope']),
      outbox(['redrive', '--id', dead[1]!.toUpperCase(), '--dry-run']),
    ]);
    expectOneLineError(
      noFilter,
      2,
      /^error: no filter given; pass at least one of --id, --type, --aggregate-type, --aggregate-id, --after, --before, or --all to redrive every dead letter \(up to --limit\)$/,
    );
    expectOneLineError(
      noReplayFilter,
      2,
      /^error: no filter given; pass at least one of --id, --type, .*--created-before, or --all to replay/,
    );
    expectOneLineError(
      missing,
      2,
      new RegExp(
        `^error: --id: no dead letter matches ${unknown} \\(no such event, or it is pending, published or discarded: see dead-letters\\); nothing was reset$`,
      ),
    );
    expectOneLineError(
      notDead,
      2,
      new RegExp(`^error: --id: no dead letter matches ${pending[0]} .*nothing was discarded$`),
    );
    expectOneLineError(window, 2, /^error: --after: must be earlier than --before \(got /);
    expectOneLineError(badId, 2, /^error: --id: must be a UUID$/);
    expect(known.code).toBe(0);
    expect(known.stdout).toMatch(/^dry run: matched 1 dead letter; 1 would be reset/);
    const { rows } = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox_events WHERE dead_lettered_at IS NOT NULL',
    );
    expect(rows[0]?.n).toBe(2);
  });

  it('status, dead-letters and replays in a schema without the outbox name the schema and the fix', async () => {
    const runs = await Promise.all(
      [['status'], ['dead-letters'], ['replays']].map((args) =>
        outbox(['--schema', 'no_outbox_here', ...args]),
      ),
    );
    for (const run of runs) {
      expectOneLineError(
        run,
        1,
        /^error: outbox table no_outbox_here\.outbox_\w+ not found \(looked in schema "no_outbox_here"\): give the outbox's schema once: --schema <name> or OUTBOX_SCHEMA; if the outbox was never migrated there, run `npx pg-lambda-outbox migrate --schema no_outbox_here`$/,
      );
    }
  });

  it('--version prints the package version', async () => {
    const { version } = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      version: string;
    };
    const run = await outbox(['--version'], {});
    expect(run).toMatchObject({ code: 0, stdout: `${version}\n`, stderr: '' });
  });

  it("docs/cli.md's table has a row for every command", () => {
    const doc = fs.readFileSync(path.join(ROOT, 'docs', 'cli.md'), 'utf8');
    const rows = [...doc.matchAll(/^\| `([a-z-]+)[ `]/gm)].map((m) => m[1]);
    const commands = program().commands.map((c) => c.name());
    expect(commands.length).toBeGreaterThan(8);
    expect(commands.filter((c) => !rows.includes(c))).toEqual([]);
  });
});
