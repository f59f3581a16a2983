// The CLI against what a database may hold: millions of dead letters (the
// count stops at a cap), a query stuck behind a lock (statement_timeout),
// strings with control characters (escaped in text output, exact in JSON).
import { Command } from 'commander';
import { beforeEach, describe, expect, it } from 'vitest';
import { withPool } from '../lib/cli/shared.js';
import { printable, textTable } from '../lib/operations/text-table.js';
import { listDeadLetters } from '../lib/sql/list-dead-letters.js';
import { runCli } from './support/cli.js';
import { useTestDatabase } from './support/database.js';

const db = useTestDatabase();

/** The CLI from source, as an operator runs it (test/support/cli.ts). */
const outbox = (args: string[]) => runCli(args, { DATABASE_URL: db.url });

/** `count` dead letters, written with SQL (no check on their strings), each field from `fields(i)`. */
async function deadLetters(count: number, fields = "'order.created', 'o-' || g, 'publish failed'") {
  await db.pool.query(
    `INSERT INTO outbox_events (id, aggregate_type, event_type, aggregate_id, last_error, payload, attempts, dead_lettered_at)
     SELECT gen_random_uuid(), 'order', ${fields}, '{}', 3, now() FROM generate_series(1, ${count}) g`,
  );
}

// C0 but tab and newline, DEL, C1 (U+009B is a one-character CSI).
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const CONTROL = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F]/;

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

describe('dead-letters on a large outbox', () => {
  it('counts up to 10,000 and then says "10,000+", instead of counting every match', async () => {
    await deadLetters(10_003);
    const [text, json] = await Promise.all([
      outbox(['dead-letters', '--limit', '2']),
      outbox(['dead-letters', '--limit', '2', '--json']),
    ]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^2 of 10,000\+ dead letters \(oldest first/m);
    expect(JSON.parse(json.stdout)).toMatchObject({ total: 10_000, totalCapped: true });
    expect(JSON.parse(json.stdout).rows).toHaveLength(2);

    // The library: the cap is an option; a count within it is exact.
    const few = await listDeadLetters(db.pool, { limit: 5, countCap: 10_003 });
    expect(few).toMatchObject({ total: 10_003, totalCapped: false });
    expect(few.rows.map((r) => r.aggregateId)).toEqual(['o-1', 'o-2', 'o-3', 'o-4', 'o-5']);
    expect(await listDeadLetters(db.pool, { limit: 5, eventType: 'order.none' })).toEqual({
      total: 0,
      totalCapped: false,
      rows: [],
    });
  });

  it("cuts a query off after --statement-timeout seconds (default 30), instead of waiting on the table's lock", async () => {
    await deadLetters(3);
    const locker = await db.pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE');
      const stuck = await outbox(['--statement-timeout', '1', 'dead-letters']);
      expect(stuck.code).toBe(1);
      expect(stuck.stderr).toMatch(/^error: canceling statement due to statement timeout$/m);
      expect(stuck.stdout).toBe('');
      const status = await outbox(['status', '--statement-timeout', '1']);
      expect(status.code).toBe(1);
    } finally {
      await locker.query('ROLLBACK');
      locker.release();
    }
    const bad = await outbox(['--statement-timeout', '0', 'dead-letters']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--statement-timeout.*expected a number from 1 to 86400/);

    // The default, on the connection a command gets.
    process.env.DATABASE_URL = db.url;
    const command = new Command().option('--statement-timeout <s>', '', Number);
    const show = (args: string[]) =>
      withPool(command.parse(args, { from: 'user' }), async (pool) => {
        const { rows } = await pool.query('SHOW statement_timeout');
        return rows[0].statement_timeout;
      });
    expect(await show([])).toBe('30s');
    expect(await show(['--statement-timeout', '5'])).toBe('5s');
  });
});

describe('database strings in text output', () => {
  it('escapes control characters (C0, DEL, C1) in text output; JSON keeps the strings exact', async () => {
    const aggregateId = 'o-1\u009b2J\u001b]0;pwned\u0007';
    const eventType = 'order.\u009b31mcreated\u007f';
    const lastError = 'failed:\u001b[2J\r\u0085 overwritten\u202e';
    await db.pool.query(
      `INSERT INTO outbox_events (id, aggregate_type, event_type, aggregate_id, last_error, payload, attempts, dead_lettered_at)
       VALUES (gen_random_uuid(), 'order', $1, $2, $3, '{}', 3, now())`,
      [eventType, aggregateId, lastError],
    );
    const [text, json] = await Promise.all([outbox(['dead-letters']), outbox(['dead-letters', '--json'])]);
    expect(text.code).toBe(0);
    expect(text.stdout).not.toMatch(CONTROL);
    expect(text.stdout).not.toContain('\u202e');
    expect(text.stdout).toContain('order:o-1\\u009b2J\\u001b]0;pwned\\u0007');
    expect(text.stdout).toContain('order.\\u009b31mcreated\\u007f');
    // The error is shown on one line: CR is whitespace there.
    expect(text.stdout).toContain('failed:\\u001b[2J \\u0085 overwritten\\u202e');
    // A table row is still one line.
    expect(text.stdout.split('\n')).toHaveLength(6);

    expect(json.stdout).not.toMatch(CONTROL);
    const row = JSON.parse(json.stdout).rows[0];
    expect(row).toMatchObject({ aggregateId, eventType, lastError });
  });

  it('printable and textTable escape what a terminal would act on, and keep tab and newline between lines', () => {
    expect(printable('a\u009bb\u001bc\u0000d\u007fe\u0085f\tg\nh\ri')).toBe(
      'a\\u009bb\\u001bc\\u0000d\\u007fe\\u0085f\tg\nh\\u000di',
    );
    expect(printable('a\tb\nc', 'cell')).toBe('a\\u0009b\\u000ac');
    expect(printable('plain ü € 日本')).toBe('plain ü € 日本');
    // Widths count the escaped text, so columns stay aligned.
    expect(
      textTable(
        ['id', 'x'],
        [
          ['a\u009b', '1'],
          ['bbbbbbbbb', '2'],
        ],
      ).split('\n'),
    ).toEqual(['id         x', '---------  -', 'a\\u009b    1', 'bbbbbbbbb  2']);
  });
});
