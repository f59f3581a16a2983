import fs from 'node:fs';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { MIGRATIONS_DIR, migrate, setNotifyTrigger } from '../lib/db/migrate.js';
import { dropDatabase, ensureDatabase } from '../scripts/local/postgres.js';
import { testDatabaseName } from './support/database.js';

const created: string[] = [];
afterAll(async () => {
  for (const name of created) await dropDatabase(inject('adminDatabaseUrl'), name);
});

async function freshDatabase(): Promise<string> {
  const name = testDatabaseName();
  created.push(name);
  return ensureDatabase(inject('adminDatabaseUrl'), name);
}

describe('migrations', () => {
  it('four processes migrating at once end with one correctly applied schema', async () => {
    const url = await freshDatabase();
    const results = await Promise.allSettled([1, 2, 3, 4].map(() => migrate({ databaseUrl: url })));
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled']);
    const ran = results.map((r) => (r as PromiseFulfilledResult<string[]>).value);
    const files = fs.readdirSync(MIGRATIONS_DIR).filter((f) => f.endsWith('.sql'));
    // Exactly one process applied the migrations; the others found nothing to do.
    expect(ran.filter((names) => names.length > 0)).toHaveLength(1);
    expect(ran.flat().sort()).toEqual(files.map((f) => f.replace(/\.sql$/, '')).sort());

    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const applied = await client.query('SELECT name FROM outbox_migrations ORDER BY id');
      expect(applied.rows.map((r) => r.name)).toHaveLength(files.length);
      const tables = await client.query(
        `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1`,
      );
      expect(tables.rows.map((r) => r.table_name)).toEqual(
        expect.arrayContaining(['outbox_events', 'processed_events', 'outbox_dead_letters']),
      );
      // The outbox's own tables only: the example domain belongs to the reference stack.
      expect(tables.rows.map((r) => r.table_name)).not.toContain('orders');
      expect(tables.rows.map((r) => r.table_name)).not.toContain('order_notifications');
      // The claim index covers only rows a relay may still pick up.
      const index = await client.query(
        `SELECT indexdef FROM pg_indexes WHERE indexname = 'outbox_events_claimable'`,
      );
      expect(index.rows[0].indexdef).toMatch(
        /WHERE \(\(processed_at IS NULL\) AND \(dead_lettered_at IS NULL\)\)/,
      );
    } finally {
      await client.end();
    }
    // A later run is a no-op.
    await expect(migrate({ databaseUrl: url })).resolves.toEqual([]);
  });

  it('NOTIFY trigger is off by default and can be switched on', async () => {
    const url = await freshDatabase();
    await migrate({ databaseUrl: url });
    const listener = new pg.Client({ connectionString: url });
    const writer = new pg.Client({ connectionString: url });
    await Promise.all([listener.connect(), writer.connect()]);
    try {
      const notes: string[] = [];
      listener.on('notification', (n) => notes.push(n.channel));
      await listener.query('LISTEN outbox_events');
      const insert = `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
                      VALUES (gen_random_uuid(), 'a', '1', 't', '{}')`;
      await writer.query(insert);
      await new Promise((r) => setTimeout(r, 200));
      expect(notes).toEqual([]);
      await setNotifyTrigger(writer, true);
      await writer.query(insert);
      await new Promise((r) => setTimeout(r, 200));
      expect(notes).toEqual(['outbox_events']);
    } finally {
      await Promise.all([listener.end(), writer.end()]);
    }
  });
});
