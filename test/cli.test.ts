import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { migrationSql } from '../lib/db/migrate.js';
import { freePort } from '../scripts/local/free-port.js';
import { type CliRun, runCli } from './support/cli.js';
import { createTestDatabase, useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';

const db = useTestDatabase();

type Run = CliRun;

/** The CLI from source, as an operator runs it (test/support/cli.ts). */
const outbox = (args: string[], env: Record<string, string | undefined> = { DATABASE_URL: db.url }) =>
  runCli(args, env);

/** Failure output is one line on stderr, nothing on stdout. */
function expectOneLineError(run: Run, code: number, message: RegExp) {
  expect(run.code).toBe(code);
  expect(run.stdout).toBe('');
  expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(run.stderr.trimEnd()).toMatch(message);
}

let dead: string[];
let pending: string[];

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, outbox_replays');
  pending = await insertEvents(db.pool, 3);
  dead = await insertEvents(db.pool, 3, (i) => ({
    eventType: i < 2 ? 'invoice.sent' : 'order.paid',
    aggregateType: 'invoice',
    aggregateId: `inv-${i}`,
  }));
  // One pending event backs off, one is leased; the three others are dead letters.
  await db.pool.query(
    `UPDATE outbox_events SET retry_after = now() + interval '1 hour', attempts = 1 WHERE id = $1`,
    [pending[0]],
  );
  await db.pool.query(
    `UPDATE outbox_events SET locked_until = now() + interval '1 minute', locked_by = gen_random_uuid(), attempts = 1
     WHERE id = $1`,
    [pending[1]],
  );
  await db.pool.query(
    `UPDATE outbox_events
     SET attempts = 4, dead_lettered_at = now(),
         last_error = CASE WHEN event_type = 'invoice.sent' THEN 'no route for event type "invoice.sent"'
                           ELSE E'attempt limit (4) reached;\\nlast error: SQS throttled' END
     WHERE id = ANY($1::uuid[])`,
    [dead],
  );
});

async function deadCount(): Promise<number> {
  const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM outbox_dead_letters');
  return rows[0].n;
}

describe('pg-lambda-outbox (lib/cli)', () => {
  it('status: counts as a table and as JSON', async () => {
    const [text, json] = await Promise.all([outbox(['status']), outbox(['status', '--json'])]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^pending\s+3$/m);
    expect(text.stdout).toMatch(/^ {2}leased \(being published\)\s+1$/m);
    expect(text.stdout).toMatch(/^ {2}backing off \(will retry\)\s+1$/m);
    expect(text.stdout).toMatch(/^dead letters\s+3$/m);
    expect(text.stdout).toMatch(/^oldest pending: \d+s old$/m);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({
      pending: 3,
      leased: 1,
      backingOff: 1,
      deadLetters: 3,
      blockedAggregates: 0,
      oldestPendingAgeSeconds: expect.any(Number),
    });
  });

  it('discard: --dry-run first; then finished without publishing, out of the dead letters, aggregate released, in history', async () => {
    // A later event of inv-0 waits behind its dead letter: the aggregate is held back.
    await insertEvents(db.pool, 1, () => ({ aggregateType: 'invoice', aggregateId: 'inv-0' }));
    const status = await outbox(['status']);
    expect(status.stdout).toMatch(/^ {2}aggregates held back \(ordered, block\)\s+1$/m);

    const refused = await outbox(['discard']);
    expectOneLineError(
      refused,
      2,
      /^error: no filter given; .*, or --all to discard every dead letter \(up to --limit\)$/,
    );

    const dry = await outbox(['discard', '--aggregate-id', 'inv-0', '--dry-run']);
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(
      /^dry run: matched 1 dead letter; 1 would be discarded \(never published\)\. Nothing was changed\.$/m,
    );
    expect(dry.stdout).toContain(dead[0]);
    expect(await deadCount()).toBe(3);

    const real = await outbox(['discard', '--id', dead[0]!, '--json']);
    expect(real.code).toBe(0);
    expect(JSON.parse(real.stdout)).toEqual({
      action: 'discard',
      dryRun: false,
      matched: 1,
      reset: 0,
      discarded: 1,
      busy: 0,
      ids: [dead[0]],
    });
    expect(await deadCount()).toBe(2);
    const { rows } = await db.pool.query(
      'SELECT id, discarded_by, last_error FROM outbox_discarded_events ORDER BY seq',
    );
    expect(rows).toEqual([
      {
        id: dead[0],
        discarded_by: expect.stringMatching(/^cli:/),
        last_error: 'no route for event type "invoice.sent"',
      },
    ]);
    const after = JSON.parse((await outbox(['status', '--json'])).stdout);
    expect(after).toMatchObject({ deadLetters: 2, blockedAggregates: 0, pending: 4 });
  });

  it('dead-letters: id, type, aggregate, attempts, when and why; --type and --limit narrow it', async () => {
    const [all, invoices, json] = await Promise.all([
      outbox(['dead-letters']),
      outbox(['dead-letters', '--type', 'invoice.sent', '--limit', '1']),
      outbox(['dead-letters', '--json']),
    ]);
    expect(all.code).toBe(0);
    const lines = all.stdout.split('\n');
    expect(lines[0]).toMatch(
      /^id\s+event type\s+aggregate\s+attempts\s+redrives\s+dead-lettered at\s+last error$/,
    );
    expect(lines[2]).toMatch(
      new RegExp(
        `^${dead[0]}\\s+invoice\\.sent\\s+invoice:inv-0\\s+4\\s+0\\s+\\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z\\s+no route for event type "invoice\\.sent"$`,
      ),
    );
    // A multi-line error is shown on one line in the table.
    expect(lines[4]).toMatch(/order\.paid .*attempt limit \(4\) reached; last error: SQS throttled$/);
    expect(all.stdout).toMatch(/^3 of 3 dead letters/m);

    expect(invoices.stdout).toContain(dead[0]);
    expect(invoices.stdout).not.toContain(dead[1]);
    expect(invoices.stdout).toMatch(/^1 of 2 dead letters/m);

    const page = JSON.parse(json.stdout);
    expect(page.total).toBe(3);
    expect(page.rows.map((r: { id: string }) => r.id)).toEqual(dead);
    expect(page.rows[2]).toMatchObject({
      eventType: 'order.paid',
      aggregateType: 'invoice',
      aggregateId: 'inv-2',
      attempts: 4,
      lastError: 'attempt limit (4) reached;\nlast error: SQS throttled',
    });
  });

  it('redrive --dry-run shows what would be reset and changes nothing; without it, resets', async () => {
    const dry = await outbox(['redrive', '--type', 'invoice.sent', '--dry-run']);
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(
      /^dry run: matched 2 dead letters; 2 would be reset\. Nothing was changed\.$/m,
    );
    expect(dry.stdout).toContain(dead[0]);
    expect(dry.stdout).toContain(dead[1]);
    expect(await deadCount()).toBe(3);

    const json = await outbox(['redrive', '--id', dead[0]!, '--id', dead[2]!, '--dry-run', '--json']);
    expect(JSON.parse(json.stdout)).toEqual({
      action: 'redrive',
      dryRun: true,
      matched: 2,
      reset: 0,
      discarded: 0,
      busy: 0,
      ids: [dead[0], dead[2]],
    });
    expect(await deadCount()).toBe(3);

    const real = await outbox(['redrive', '--aggregate-type', 'invoice', '--limit', '2']);
    expect(real.code).toBe(0);
    expect(real.stdout).toMatch(/^reset 2 dead letters to pending \(3 matched\)/m);
    expect(real.stdout).toMatch(/^1 more match beyond the limit/m);
    expect(await deadCount()).toBe(1);
    const { rows } = await db.pool.query('SELECT id FROM outbox_events WHERE redrive_count = 1 ORDER BY seq');
    expect(rows.map((r) => r.id)).toEqual([dead[0], dead[1]]);
  });

  it('bad input exits 2 with one clear line and changes nothing', async () => {
    const runs = await Promise.all([
      outbox(['redrive']),
      outbox(['redrive', '--all', '--limit', '20000']),
      outbox(['redrive', '--id', 'not-a-uuid']),
      outbox(['redrive', '--after', '2025-02-01T00:00:00Z', '--before', '2025-01-01T00:00:00Z']),
      outbox(['redrive', '--before', 'last tuesday']),
      outbox(['redrive', '--tpye', 'order.created']),
      outbox(['dead-letters', '--limit', 'many']),
    ]);
    const [noFilter, overLimit, badId, window, badDate, typo, badLimit] = runs as [
      Run,
      Run,
      Run,
      Run,
      Run,
      Run,
      Run,
    ];
    expectOneLineError(
      noFilter,
      2,
      /^error: no filter given; pass at least one of --id, .* or --all to redrive/,
    );
    expectOneLineError(overLimit, 2, /^error: --limit: must be at most 10000$/);
    expectOneLineError(badId, 2, /^error: --id: must be a UUID$/);
    expectOneLineError(window, 2, /^error: --after: must be earlier than --before \(got .*\)$/);
    expectOneLineError(badDate, 2, /^error: --before: must be an ISO 8601 date-time/);
    expectOneLineError(typo, 2, /^error: unknown option '--tpye' \(Did you mean --type\?\)$/);
    expectOneLineError(
      badLimit,
      2,
      /^error: option '--limit <n>' argument 'many' is invalid\. expected a whole number\.$/,
    );
    expect(await deadCount()).toBe(3);
  });

  it('replay: --dry-run first; then back to pending as one audited replay; replays lists it; --help lists replay', async () => {
    const shipped = await insertEvents(db.pool, 2, (i) => ({
      eventType: 'order.shipped',
      aggregateId: `ship-${i}`,
    }));
    await db.pool.query(
      'UPDATE outbox_events SET attempts = 1, processed_at = now() WHERE id = ANY($1::uuid[])',
      [shipped],
    );

    const dry = await outbox(['replay', '--type', 'order.shipped', '--dry-run']);
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(/^dry run: matched 2 events; 2 would be replayed\. Nothing was changed\.$/m);
    expect(dry.stdout).toContain(shipped[0]);
    const { rows: none } = await db.pool.query('SELECT count(*)::int AS n FROM outbox_replays');
    expect(none[0].n).toBe(0);

    const real = await outbox(['replay', '--type', 'order.shipped', '--limit', '1', '--json']);
    expect(real.code).toBe(0);
    const result = JSON.parse(real.stdout);
    expect(result).toMatchObject({
      action: 'replay',
      dryRun: false,
      matched: 2,
      replayed: 1,
      ids: [shipped[0]],
    });
    const { rows: audit } = await db.pool.query(
      'SELECT id, requested_by, caller, filter FROM outbox_replays',
    );
    expect(audit).toEqual([
      {
        id: result.replayId,
        requested_by: expect.stringMatching(/^cli:.+@.+$/),
        caller: {
          via: 'cli',
          os_user: expect.any(String),
          host: expect.any(String),
          pid: expect.any(Number),
        },
        filter: { eventType: 'order.shipped', limit: 1, all: false },
      },
    ]);
    const { rows } = await db.pool.query(
      'SELECT id FROM outbox_events WHERE replay_id = $1 AND processed_at IS NULL',
      [result.replayId],
    );
    expect(rows).toEqual([{ id: shipped[0] }]);

    const text = await outbox(['replay', '--aggregate-type', 'order', '--aggregate-id', 'ship-1']);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^replay [0-9a-f-]{36}: 1 event back to pending \(1 matched\)/m);

    const listed = await outbox(['replays']);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain(result.replayId);
    expect(listed.stdout.split('\n')[0]).toMatch(
      /replay id +requested at +requested by +matched +replayed +waiting/,
    );

    const help = await outbox(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^ +replay \[options\] +republish events that were already published/m);
    expect(help.stdout).toMatch(/^ +replays \[options\]/m);
  });

  it('replay: bad input exits 2 with one clear line and changes nothing', async () => {
    await db.pool.query('UPDATE outbox_events SET processed_at = now() WHERE id = $1', [pending[2]]);
    const before = (await db.pool.query('SELECT * FROM outbox_events ORDER BY seq')).rows;
    const [noFilter, overLimit, badId, window, badDate, deadLetterFlag] = (await Promise.all([
      outbox(['replay']),
      outbox(['replay', '--all', '--limit', '20000']),
      outbox(['replay', '--id', 'nope']),
      outbox([
        'replay',
        '--created-after',
        '2025-02-01T00:00:00Z',
        '--created-before',
        '2025-01-01T00:00:00Z',
      ]),
      outbox(['replay', '--published-after', 'yesterday']),
      outbox(['replay', '--after', '2025-01-01T00:00:00Z']),
    ])) as Run[];
    expectOneLineError(
      noFilter!,
      2,
      /^error: no filter given; .*, or --all to replay every published event \(up to --limit\)$/,
    );
    expectOneLineError(overLimit!, 2, /^error: --limit: must be at most 10000$/);
    expectOneLineError(badId!, 2, /^error: --id: must be a UUID$/);
    expectOneLineError(
      window!,
      2,
      /^error: --created-after: must be earlier than --created-before \(got .*\)$/,
    );
    expectOneLineError(badDate!, 2, /^error: --published-after: must be an ISO 8601 date-time/);
    expectOneLineError(deadLetterFlag!, 2, /^error: unknown option '--after'/);
    expect((await db.pool.query('SELECT * FROM outbox_events ORDER BY seq')).rows).toEqual(before);
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM outbox_replays');
    expect(rows[0].n).toBe(0);
  });

  it('no DATABASE_URL, or a database that does not answer: a one-line error saying what to do', async () => {
    const port = await freePort();
    const [unset, down] = await Promise.all([
      outbox(['status'], {}),
      outbox(['status'], { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/postgres` }),
    ]);
    expectOneLineError(unset, 2, /^error: DATABASE_URL: is not set; .*`npm start` prints the URL/);
    expectOneLineError(down, 1, /^error: cannot reach the database in DATABASE_URL: .*ECONNREFUSED/);
  });
});

describe('pg-lambda-outbox sql and migrate', () => {
  /** The outbox's tables (and views) in one schema, by name. */
  async function relations(pool: { query: typeof db.pool.query }, schema: string): Promise<string[]> {
    const { rows } = await pool.query(
      `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relkind IN ('r', 'v') ORDER BY 1`,
      [schema],
    );
    return rows.map((r: { name: string }) => r.name);
  }

  it('sql: every migration in order, each under a header naming it; --after gives the newer ones; --out writes one file each', async () => {
    const names = (await migrationSql()).map((m) => m.name);
    expect(names.length).toBeGreaterThan(3);

    const all = await outbox(['sql'], {});
    expect(all.code).toBe(0);
    const headers = [...all.stdout.matchAll(/^-- pg-lambda-outbox migration (\S+)/gm)].map((m) => m[1]);
    expect(headers).toEqual(names);
    expect(all.stdout).toMatch(/CREATE TABLE outbox_events/);

    // The schema as a global flag (before the command) or from OUTBOX_SCHEMA.
    const [flagged, fromEnv, after] = await Promise.all([
      outbox(['--schema', 'outbox', 'sql'], {}),
      outbox(['sql'], { OUTBOX_SCHEMA: 'outbox' }),
      outbox(['sql', '--schema', 'outbox', '--after', names[1]!], {}),
    ]);
    expect(flagged.code).toBe(0);
    expect(flagged.stdout).toMatch(/^CREATE SCHEMA IF NOT EXISTS "outbox";$/m);
    expect(fromEnv.stdout).toBe(flagged.stdout);
    expect([...after.stdout.matchAll(/^-- pg-lambda-outbox migration (\S+)/gm)].map((m) => m[1])).toEqual(
      names.slice(2),
    );

    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-sql-'));
    const written = await outbox(['sql', '--out', path.join(dir, 'outbox')], {});
    expect(written.code).toBe(0);
    expect(fs.readdirSync(path.join(dir, 'outbox')).sort()).toEqual(names.map((n) => `${n}.sql`));
    fs.rmSync(dir, { recursive: true, force: true });

    const [unknown, badSchema, upToDate] = await Promise.all([
      outbox(['sql', '--after', 'nope'], {}),
      outbox(['sql', '--schema', 'no-such schema'], {}),
      outbox(['sql', '--after', names.at(-1)!], {}),
    ]);
    expectOneLineError(unknown, 2, /^error: after: no migration named "nope"; known: /);
    expectOneLineError(badSchema, 2, /^error: --schema: expected a schema name of letters/);
    expect(upToDate.code).toBe(0);
    expect(upToDate.stdout).toBe('');
    expect(upToDate.stderr).toMatch(/up to date/);
  });

  it("sql: the printed SQL, applied as a team's own migration tool would, creates the outbox in its schema", async () => {
    const target = await createTestDatabase({ migrate: false });
    try {
      const printed = await outbox(['sql', '--schema', 'outbox_sql'], {});
      expect(printed.code).toBe(0);
      await target.pool.query(printed.stdout);
      expect(await relations(target.pool, 'outbox_sql')).toEqual(
        expect.arrayContaining([
          'outbox_events',
          'processed_events',
          'outbox_replays',
          'outbox_dead_letters',
        ]),
      );
      expect(await relations(target.pool, 'public')).toEqual([]);
    } finally {
      await target.drop();
    }
  });

  it('migrate: into a schema, then up to date; --no-notify and --notify switch the trigger; status reads that schema', async () => {
    const target = await createTestDatabase({ migrate: false });
    try {
      const env = { DATABASE_URL: target.url };
      const first = await outbox(['migrate', '--schema', 'outbox_cli'], env);
      expect(first.code).toBe(0);
      const names = (await migrationSql()).map((m) => m.name);
      expect(first.stdout).toContain(`applied in schema outbox_cli: ${names.join(', ')}`);
      expect(await relations(target.pool, 'outbox_cli')).toEqual(
        expect.arrayContaining(['outbox_events', 'outbox_migrations', 'processed_events']),
      );
      expect(await relations(target.pool, 'public')).toEqual([]);

      const trigger = async () => {
        const { rows } = await target.pool.query(
          `SELECT t.tgenabled FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'outbox_cli' AND t.tgname = 'outbox_events_notify'`,
        );
        return rows[0]?.tgenabled;
      };
      const off = await outbox(['migrate', '--no-notify'], { ...env, OUTBOX_SCHEMA: 'outbox_cli' });
      expect(off.code).toBe(0);
      expect(off.stdout).toMatch(/^outbox tables in schema outbox_cli are up to date$/m);
      expect(off.stdout).toMatch(/^NOTIFY trigger disabled$/m);
      expect(await trigger()).toBe('D');
      const on = await outbox(['--schema', 'outbox_cli', 'migrate', '--notify'], env);
      expect(on.stdout).toMatch(/^NOTIFY trigger enabled$/m);
      expect(await trigger()).toBe('O');

      await target.pool.query(
        `INSERT INTO outbox_cli.outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
         VALUES (gen_random_uuid(), 'order', 'o-1', 'order.created', '{}')`,
      );
      const status = await outbox(['status', '--schema', 'outbox_cli', '--json'], env);
      expect(status.code).toBe(0);
      expect(JSON.parse(status.stdout)).toMatchObject({ pending: 1, deadLetters: 0 });
      // Without the schema the tables are not on the search_path.
      const elsewhere = await outbox(['status'], env);
      expectOneLineError(
        elsewhere,
        1,
        /^error: outbox table outbox_events not found \(no schema was given.*\): give the outbox's schema once: --schema <name> or OUTBOX_SCHEMA; if the outbox was never migrated there, run `npx pg-lambda-outbox migrate --schema <name>`$/,
      );
    } finally {
      await target.drop();
    }
  });

  it('migrate without DATABASE_URL: a one-line error saying what to do', async () => {
    expectOneLineError(await outbox(['migrate'], {}), 2, /^error: DATABASE_URL: is not set; /);
  });

  it('--help on every command', async () => {
    const commands = ['status', 'dead-letters', 'redrive', 'discard', 'replay', 'replays', 'sql', 'migrate'];
    const runs = await Promise.all(commands.map((c) => outbox([c, '--help'], {})));
    runs.forEach((run, i) => {
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(new RegExp(`^Usage: pg-lambda-outbox ${commands[i]} \\[options\\]`));
      expect(run.stdout).toMatch(/--schema <name>/);
    });
  });
});
