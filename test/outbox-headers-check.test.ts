import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { MIGRATIONS_DIR, migrate } from '../lib/db/migrate.js';
import { dropDatabase, ensureDatabase } from '../scripts/local/postgres.js';
import { testDatabaseName, useTestDatabase } from './support/database.js';

const HEADERS_MIGRATION = '1764900100000_outbox-headers-check.sql';
const CONSTRAINT = 'outbox_events_headers_object_of_strings';

const db = useTestDatabase();

const insert = (headers: string) =>
  db.pool.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, headers)
     VALUES (gen_random_uuid(), 'order', 'o-1', 'order.created', '{}', $1::jsonb)`,
    [headers],
  );

describe('CHECK: headers is a JSON object of strings', () => {
  it.each([
    'null',
    '[]',
    '["a"]',
    '"text"',
    '{"a":1}',
    '{"a":"b","n":null}',
    '{"a":{"b":"c"}}',
    '{"a":["b"]}',
  ])('refuses headers %s written by SQL', async (headers) => {
    await expect(insert(headers)).rejects.toMatchObject({ code: '23514', constraint: CONSTRAINT });
  });

  it.each(['{}', '{"a":"b"}', '{"traceparent":"00-abc-def-01","x-amzn-trace-id":"Root=1-abc"}'])(
    'accepts headers %s',
    async (headers) => {
      await expect(insert(headers)).resolves.toMatchObject({ rowCount: 1 });
    },
  );

  it('also guards UPDATEs', async () => {
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
       VALUES (gen_random_uuid(), 'order', 'o-2', 'order.created', '{}') RETURNING id`,
    );
    await expect(
      db.pool.query(`UPDATE outbox_events SET headers = '{"n":2}' WHERE id = $1`, [rows[0]?.id]),
    ).rejects.toMatchObject({ code: '23514' });
  });
});

describe('the migration on a table that already holds bad headers', () => {
  const created: string[] = [];
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-migrations-'));
  afterAll(async () => {
    for (const name of created) await dropDatabase(inject('adminDatabaseUrl'), name);
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('repairs them, then validates the constraint', async () => {
    // The migrations before this one, applied to a fresh database.
    for (const file of fs.readdirSync(MIGRATIONS_DIR)) {
      if (file.endsWith('.sql') && file < HEADERS_MIGRATION) {
        fs.copyFileSync(path.join(MIGRATIONS_DIR, file), path.join(tmp, file));
      }
    }
    const name = testDatabaseName();
    created.push(name);
    const url = await ensureDatabase(inject('adminDatabaseUrl'), name);
    await migrate({ databaseUrl: url, dir: tmp });

    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const before: Array<[string, string]> = [
        ['null', '{}'],
        ['[]', '{}'],
        ['"text"', '{}'],
        ['{"a":"b"}', '{"a":"b"}'],
        ['{"a":["b"]}', '{"a":"[\\"b\\"]"}'],
        [
          '{"n":1,"s":"x","b":true,"z":null,"o":{"k":"v"}}',
          '{"b":"true","n":"1","o":"{\\"k\\": \\"v\\"}","s":"x"}',
        ],
      ];
      for (const [i, [headers]] of before.entries()) {
        await client.query(
          `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, headers)
           VALUES (gen_random_uuid(), 'order', $1, 'order.created', '{}', $2::jsonb)`,
          [`o-${i}`, headers],
        );
      }

      const ran = await migrate({ databaseUrl: url });
      expect(ran).toContain(HEADERS_MIGRATION.replace(/\.sql$/, ''));

      const { rows } = await client.query<{ headers: unknown }>(
        `SELECT headers FROM outbox_events ORDER BY aggregate_id`,
      );
      expect(rows.map((r) => r.headers)).toEqual(before.map(([, after]) => JSON.parse(after)));
      const constraint = await client.query(`SELECT convalidated FROM pg_constraint WHERE conname = $1`, [
        CONSTRAINT,
      ]);
      expect(constraint.rows).toEqual([{ convalidated: true }]);
    } finally {
      await client.end();
    }
  });
});
