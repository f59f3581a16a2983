import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createConsumer } from '../lib/consumer/consumer.js';
import { migrate, migrationSql, setNotifyTrigger } from '../lib/db/migrate.js';
import { withTransaction } from '../lib/db/transaction.js';
import { ConfigError } from '../lib/errors.js';
import { runCleanup } from '../lib/operations/cleanup.js';
import { redriveDeadLetters } from '../lib/operations/redrive.js';
import { replayEvents } from '../lib/operations/replay.js';
import { enqueueEvents } from '../lib/outbox/enqueue.js';
import { listDeadLetters } from '../lib/sql/list-dead-letters.js';
import { outboxStats } from '../lib/sql/outbox-stats.js';
import { listReplays } from '../lib/sql/replay-events.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';
import { toSqsEvent } from './support/sqs-event.js';

// A service's database as the outbox finds it on the first day: its own
// `orders` and `order_notifications`, and an unrelated `outbox_events` of
// another shape, all in public, with rows.
const db = useTestDatabase({ migrate: false });
const aws = awsClients();
const SCHEMA = 'outbox';

const APP_TABLES = `
  CREATE TABLE orders (id bigint PRIMARY KEY, sku text NOT NULL);
  CREATE TABLE order_notifications (order_id bigint NOT NULL, channel text NOT NULL);
  CREATE TABLE outbox_events (msg_id serial PRIMARY KEY, topic text NOT NULL, body text);
  INSERT INTO orders VALUES (1, 'sku-1'), (2, 'sku-2');
  INSERT INTO order_notifications VALUES (1, 'email');
  INSERT INTO outbox_events (topic, body) VALUES ('legacy', 'keep me');`;

/** Every column and row of the service's own tables: what "untouched" is checked against. */
async function appState(pool: pg.Pool) {
  const { rows: columns } = await pool.query(
    `SELECT table_name, column_name, data_type, ordinal_position
     FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position`,
  );
  const rows = {
    orders: (await pool.query('SELECT * FROM public.orders ORDER BY id')).rows,
    notifications: (await pool.query('SELECT * FROM public.order_notifications ORDER BY order_id')).rows,
    outbox: (await pool.query('SELECT * FROM public.outbox_events ORDER BY msg_id')).rows,
  };
  const { rows: indexes } = await pool.query(
    `SELECT indexname FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1`,
  );
  return { columns, rows, indexes };
}

/** Tables, views, indexes and functions of a schema: what the migrations created there. */
async function schemaObjects(pool: pg.Pool, schema: string) {
  const { rows } = await pool.query(
    `SELECT c.relname AS name, c.relkind AS kind FROM pg_class c
     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'v', 'i')
     UNION ALL
     SELECT p.proname, 'f' FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
     ORDER BY 1`,
    [schema],
  );
  return rows.map((r) => `${r.kind}:${r.name}`);
}

describe('outbox tables in a schema of their own', () => {
  let before: Awaited<ReturnType<typeof appState>>;

  beforeAll(async () => {
    await db.pool.query(APP_TABLES);
    before = await appState(db.pool);
    await migrate({ databaseUrl: db.url, schema: SCHEMA });
  });

  it("migrate({ schema }) creates everything in that schema and touches none of the service's tables", async () => {
    expect(await appState(db.pool)).toEqual(before);
    const objects = await schemaObjects(db.pool, SCHEMA);
    expect(objects).toEqual(
      expect.arrayContaining([
        'r:outbox_events',
        'r:processed_events',
        'r:processed_event_replays',
        'r:outbox_aggregate_locks',
        'r:outbox_replays',
        'r:outbox_migrations',
        'v:outbox_dead_letters',
        'v:outbox_discarded_events',
        'i:outbox_events_claimable',
        'f:outbox_events_notify',
      ]),
    );
    // No example tables: the package's migrations create the outbox's own only.
    expect(objects.filter((o) => o.includes('order'))).toEqual([]);
    // Nothing of the outbox's landed in public.
    const publicTables = (await schemaObjects(db.pool, 'public')).filter((o) => o.startsWith('r:'));
    expect(publicTables.sort()).toEqual(['r:order_notifications', 'r:orders', 'r:outbox_events']);
    // A second run finds nothing to do.
    await expect(migrate({ databaseUrl: db.url, schema: SCHEMA })).resolves.toEqual([]);
  });

  it('write, relay, consumer, operations and cleanup all work in the schema, from a connection whose search_path does not name it', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('schema'));
    const { rows: path } = await db.pool.query('SHOW search_path');
    expect(path[0].search_path).not.toContain(SCHEMA);

    const [id] = await withTransaction(db.pool, async (client) => {
      await client.query(`INSERT INTO public.orders VALUES (3, 'sku-3')`);
      return enqueueEvents(
        client,
        [{ aggregateType: 'order', aggregateId: '3', eventType: 'order.created', payload: { id: 3 } }],
        { schema: SCHEMA },
      );
    });
    const stored = await db.pool.query(`SELECT event_type FROM "outbox".outbox_events WHERE id = $1`, [id]);
    expect(stored.rows).toEqual([{ event_type: 'order.created' }]);
    expect((await outboxStats(db.pool, { schema: SCHEMA })).pending).toBe(1);

    const routes = [{ match: '*', targets: [{ type: 'sqs' as const, queueUrl: queue.url }] }];
    const { relay } = emulatorRelay(db.pool, aws, routes, { schema: SCHEMA });
    // Its closing figures too (the Pending and OldestPendingAge metrics and their alarms).
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 1, stats: { pending: 0 } });
    const messages = await drainQueue(aws.sqs, queue.url, 1);
    expect(JSON.parse(messages[0]?.Body as string)).toMatchObject({ id, type: 'order.created' });

    const handled: string[] = [];
    const consumer = createConsumer({
      name: 'schema-consumer',
      pool: db.pool,
      schema: SCHEMA,
      handlers: { 'order.created': async (event) => void handled.push(event.id) },
    });
    const first = await consumer.handleSqsEvent(toSqsEvent(messages, queue.arn));
    const again = await consumer.handleSqsEvent(toSqsEvent(messages, queue.arn));
    expect(first.batchItemFailures).toEqual([]);
    expect(again.outcomes.map((o) => o.status)).toEqual(['duplicate']);
    expect(handled).toEqual([id]);
    const dedupe = await db.pool.query(`SELECT consumer FROM "outbox".processed_events WHERE event_id = $1`, [
      id,
    ]);
    expect(dedupe.rows).toEqual([{ consumer: 'schema-consumer' }]);

    // Replay, dead letters, redrive: the operator's path.
    const replayed = await replayEvents(
      db.pool,
      { ids: [id as string], requestedBy: 'test' },
      { schema: SCHEMA },
    );
    expect(replayed).toMatchObject({ replayed: 1 });
    expect(await listReplays(db.pool, { schema: SCHEMA })).toHaveLength(1);
    await db.pool.query(
      `UPDATE "outbox".outbox_events SET dead_lettered_at = now(), processed_at = NULL, last_error = 'x' WHERE id = $1`,
      [id],
    );
    expect((await listDeadLetters(db.pool, { limit: 10, schema: SCHEMA })).total).toBe(1);
    expect(await redriveDeadLetters(db.pool, { ids: [id as string] }, { schema: SCHEMA })).toMatchObject({
      reset: 1,
    });
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 1 });
    await drainQueue(aws.sqs, queue.url, 1);

    // Cleanup with a retention of 0 days deletes the published row and the dedupe row.
    const report = await runCleanup(
      { db: db.pool, options: { outboxRetentionDays: 0, processedEventsRetentionDays: 1, schema: SCHEMA } },
      { remainingMs: () => 60_000, now: new Date(Date.now() + 2 * 86_400_000) },
    );
    expect(report).toMatchObject({
      finished: true,
      outboxEvents: { deleted: 1 },
      processedEvents: { deleted: 1 },
    });

    await setNotifyTrigger(db.pool, true, { schema: SCHEMA });
    const { rows: trigger } = await db.pool.query(
      `SELECT tgenabled FROM pg_trigger WHERE tgname = 'outbox_events_notify' AND tgrelid = '"outbox".outbox_events'::regclass`,
    );
    expect(trigger).toEqual([{ tgenabled: 'O' }]);

    // The service's own tables saw only its own write.
    const after = await appState(db.pool);
    expect(after.rows.outbox).toEqual(before.rows.outbox);
    expect(after.rows.notifications).toEqual(before.rows.notifications);
  });

  it('an elastic relay with maxRelays takes its slot, leaves when idle and reads its figures in the schema', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('schema-elastic'));
    await enqueueEvents(
      db.pool,
      Array.from({ length: 30 }, (_, i) => ({
        aggregateType: 'order',
        aggregateId: `e-${i}`,
        eventType: 'order.created',
        payload: { i },
      })),
      { schema: SCHEMA },
    );
    const routes = [{ match: '*', targets: [{ type: 'sqs' as const, queueUrl: queue.url }] }];
    const { relay, log } = emulatorRelay(db.pool, aws, routes, {
      schema: SCHEMA,
      maxRelays: 2,
      idleTailMs: 200,
      batchSize: 10,
    });
    const summary = await relay.run({ remainingMs: () => 60_000, leaveIfEmpty: true });
    expect(summary).toMatchObject({ published: 30, stoppedBecause: 'idle', stats: { pending: 0 } });
    expect(log.lines.filter((l) => l.level === 'warn' || l.level === 'error')).toEqual([]);
    // The slot was the schema's, and is free again.
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "outbox".outbox_relay_slots`);
    expect(rows[0].n).toBe(0);
    await drainQueue(aws.sqs, queue.url, 30);
  });

  it('a bad schema name is a ConfigError before anything is written', async () => {
    for (const schema of ['', 'pg_outbox', 'x'.repeat(64), 'has space', 'quote"d', '1st']) {
      await expect(
        enqueueEvents(db.pool, [{ aggregateType: 'a', aggregateId: '1', eventType: 't', payload: {} }], {
          schema,
        }),
      ).rejects.toBeInstanceOf(ConfigError);
      await expect(migrate({ databaseUrl: db.url, schema })).rejects.toBeInstanceOf(ConfigError);
    }
    // Case is kept: the name is quoted, used exactly as written.
    const odd = 'Outbox_Q';
    await migrate({ databaseUrl: db.url, schema: odd });
    await enqueueEvents(db.pool, [{ aggregateType: 'a', aggregateId: '1', eventType: 't', payload: {} }], {
      schema: odd,
    });
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "Outbox_Q".outbox_events`);
    expect(rows[0].n).toBe(1);
  });
});

describe("migrationSql: the migrations for a team's own migration tool", () => {
  it('applied in order, builds the same outbox as migrate() and leaves the session as it found it', async () => {
    const migrated = await schemaObjects(db.pool, SCHEMA);
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query(`SET search_path TO public`);
      const all = await migrationSql({ schema: 'from_tool' });
      expect(all.map((m) => m.name)).toEqual([...all.map((m) => m.name)].sort());
      // What a tool like Flyway does: each migration in a transaction of its own.
      for (const m of all) {
        await client.query('BEGIN');
        await client.query(m.sql);
        await client.query('COMMIT');
      }
      const { rows } = await client.query('SHOW search_path');
      expect(rows[0].search_path).toBe('public');
      const viaTool = await schemaObjects(db.pool, 'from_tool');
      // The same objects, less node-pg-migrate's bookkeeping table.
      expect(viaTool).toEqual(migrated.filter((o) => !o.includes('outbox_migrations')));
      // And the same columns.
      const columns = async (schema: string) =>
        (
          await db.pool.query(
            `SELECT table_name, column_name, data_type, is_nullable, column_default
             FROM information_schema.columns WHERE table_schema = $1 AND table_name <> 'outbox_migrations'
             ORDER BY table_name, ordinal_position`,
            [schema],
          )
        ).rows;
      expect(await columns('from_tool')).toEqual(await columns(SCHEMA));
    } finally {
      await client.end();
    }
  });

  it('after: only the migrations that follow a given one; an unknown name is refused', async () => {
    const all = await migrationSql();
    const tail = await migrationSql({ after: all[2]?.name });
    expect(tail.map((m) => m.name)).toEqual(all.slice(3).map((m) => m.name));
    await expect(migrationSql({ after: 'nope' })).rejects.toBeInstanceOf(ConfigError);
    // Without a schema: the files' own SQL, unqualified, nothing around it.
    expect(all[0]?.sql).toContain('CREATE TABLE outbox_events');
    expect(all[0]?.sql).not.toContain('search_path');
  });
});

describe('the default: unqualified names (existing installs)', () => {
  it('migrate() without a schema keeps working where search_path points', async () => {
    const url = new URL(db.url);
    // A role-less stand-in for an existing install: a fresh schema named by search_path.
    await db.pool.query('CREATE SCHEMA legacy');
    url.searchParams.set('options', '-c search_path=legacy');
    await migrate({ databaseUrl: url.toString() });
    const pool = new pg.Pool({ connectionString: url.toString(), max: 1 });
    try {
      const [id] = await enqueueEvents(pool, [
        { aggregateType: 'a', aggregateId: randomUUID(), eventType: 't', payload: {} },
      ]);
      const { rows } = await db.pool.query('SELECT id FROM legacy.outbox_events');
      expect(rows).toEqual([{ id }]);
    } finally {
      await pool.end();
    }
  });
});
