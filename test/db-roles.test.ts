/**
 * One database user per function (issue 34): the SQL of docs/security.md
 * ("Database roles"), run against the real PostgreSQL, then the real handlers
 * (functions/*.ts, cold-started as Lambda would) connected as those users:
 * the producer writes orders, the relay publishes them to a queue, the
 * consumer handles the messages, redrive, replay and cleanup do their work.
 * Each user is refused what its function has no business doing; the consumer
 * above all may not UPDATE or DELETE `outbox_events`.
 *
 * Roles are cluster-wide: this file's get names of their own and are dropped
 * at the end.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createOrder } from '../lib/example/orders.js';
import { createRelayWaker } from '../lib/outbox/relay-waker.js';
import { awsClients, createQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { lambdaContext } from './support/events.js';
import { coldStartEnv, restoreEnv } from './support/lambda.js';
import { toSqsEvent } from './support/sqs-event.js';

const db = useTestDatabase();
const suffix = randomBytes(4).toString('hex');
const FUNCTIONS = ['producer', 'relay', 'consumer', 'redrive', 'cleanup'] as const;
type Fn = (typeof FUNCTIONS)[number];
const roleName = (fn: Fn) => `outbox_test_${fn}_${suffix}`;
const pools = new Map<Fn, pg.Pool>();
const as = (fn: Fn) => pools.get(fn) as pg.Pool;
const denied = /permission denied/;
type Order = { orderId: string; eventId: string };

/** A connection URL of the test database for `role` (the server trusts local connections). */
function urlAs(fn: Fn): string {
  const url = new URL(db.url);
  url.username = roleName(fn);
  url.password = '';
  return url.toString();
}

const quote = (name: string) => `"${name.replaceAll('"', '""')}"`;

/**
 * The ```sql blocks of docs/security.md's "Database roles" section, with the
 * psql variables (`:"schema"`, `:"relay"`, ...) filled in.
 */
function rolesSql(vars: Record<string, string>): string[] {
  const doc = fs.readFileSync(new URL('../docs/security.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('### Database roles'), doc.indexOf('## Where payloads'));
  const blocks = [...section.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1] as string);
  return blocks.map((sql) =>
    sql.replace(/:"([a-z_]+)"/g, (_, name: string) => {
      const value = vars[name];
      if (value === undefined)
        throw new Error(`docs/security.md uses :"${name}", which the test does not set`);
      return quote(value);
    }),
  );
}

async function dropRoles() {
  const names = FUNCTIONS.map(roleName);
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  try {
    await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY($1)', [
      names,
    ]);
    const { rows } = await admin.query<{ rolname: string }>(
      'SELECT rolname FROM pg_roles WHERE rolname = ANY($1)',
      [names],
    );
    if (rows.length === 0) return;
    const list = rows.map((r) => quote(r.rolname)).join(', ');
    // Their grants live in this database only (it is dropped after this file).
    await admin.query(`DROP OWNED BY ${list}`);
    await admin.query(`DROP ROLE ${list}`);
  } finally {
    await admin.end();
  }
}

beforeAll(async () => {
  const blocks = rolesSql({
    schema: 'public',
    ...Object.fromEntries(FUNCTIONS.map((fn) => [fn, roleName(fn)])),
  });
  expect(blocks.length).toBeGreaterThanOrEqual(2);
  for (const sql of blocks) await db.pool.query(sql);
  for (const fn of FUNCTIONS) pools.set(fn, new pg.Pool({ connectionString: urlAs(fn), max: 2 }));
});

afterAll(async () => {
  restoreEnv();
  await Promise.all([...pools.values()].map((pool) => pool.end()));
  await dropRoles();
});

/** Imports a handler module fresh, as a Lambda cold start would, connected as `fn`'s user. */
async function coldStart<T>(fn: Fn, load: () => Promise<T>, env: Record<string, string> = {}): Promise<T> {
  coldStartEnv({
    AWS_ENDPOINT_URL: inject('awsEndpoint'),
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
    DATABASE_URL: urlAs(fn),
    DATABASE_SECRET_ARN: undefined,
    POWERTOOLS_LOG_LEVEL: 'ERROR',
    POWERTOOLS_METRICS_DISABLED: 'true',
    ...env,
  });
  return load();
}

describe('one database user per function (docs/security.md)', () => {
  const aws = awsClients();
  let queue: { url: string; arn: string };
  const orders: Order[] = [];

  it('the producer writes orders and their events, and wakes the relay; it cannot read or change the outbox', async () => {
    queue = await createQueue(aws.sqs, uniqueName('db-roles'));
    for (let i = 0; i < 3; i++) {
      orders.push(
        await createOrder(as('producer'), { customerId: `c-${i}`, totalCents: 100 + i, currency: 'SEK' }),
      );
    }
    const invoked: unknown[] = [];
    const waker = createRelayWaker({
      functionName: 'pg-lambda-outbox-test-relay',
      db: as('producer'),
      lambda: {
        send: async (command: unknown) => {
          invoked.push(command);
          return { StatusCode: 202 };
        },
      } as never,
      waitMs: 2_000,
    });
    expect(await waker.wake()).toBe('invoked');
    expect(invoked).toHaveLength(1);
    // It looked for a running relay and left its mark (not the fallback
    // that wakes blindly when the look fails).
    const { rows: marks } = await db.pool.query('SELECT woken_at FROM outbox_relay_wake');
    expect(marks[0]?.woken_at).toBeInstanceOf(Date);
    await expect(as('producer').query('SELECT payload FROM outbox_events')).rejects.toThrow(denied);
    await expect(as('producer').query('UPDATE outbox_events SET attempts = 0')).rejects.toThrow(denied);
    await expect(as('producer').query('DELETE FROM outbox_events')).rejects.toThrow(denied);
  });

  it('the relay (its handler, slots and all) claims, publishes and completes them; it cannot touch dedupe rows or business tables', async () => {
    const { relayHandler } = await coldStart('relay', () => import('../functions/relay.js'), {
      OUTBOX_ROUTES: JSON.stringify([{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: queue.url }] }]),
      OUTBOX_WORKERS: '1',
      OUTBOX_MAX_RELAYS: '2',
      OUTBOX_DB_CONNECTION_BUDGET: '10',
      OUTBOX_IDLE_TAIL_MS: '200',
      OUTBOX_SAFETY_MARGIN_MS: '1000',
    });
    const summary = await relayHandler({ source: 'aws.events' }, lambdaContext(20_000) as never);
    expect(summary).toMatchObject({ published: 3 });
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox_events WHERE processed_at IS NOT NULL AND id = ANY($1)',
      [orders.map((o) => o.eventId)],
    );
    expect(rows[0].n).toBe(3);
    await expect(
      as('relay').query(
        `INSERT INTO processed_events (consumer, event_id, event_type) VALUES ('x', gen_random_uuid(), 't')`,
      ),
    ).rejects.toThrow(denied);
    await expect(as('relay').query('DELETE FROM processed_events')).rejects.toThrow(denied);
    await expect(as('relay').query('SELECT * FROM orders')).rejects.toThrow(denied);
    await expect(
      as('relay').query(`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
      VALUES (gen_random_uuid(), 'order', 'x', 'order.created', '{}')`),
    ).rejects.toThrow(denied);
  });

  it('the consumer handles the messages (dedupe row and its own table), and may not UPDATE, DELETE or even read outbox_events', async () => {
    const messages = [];
    const deadline = Date.now() + 15_000;
    while (messages.length < 3 && Date.now() < deadline) {
      const { Messages = [] } = await aws.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queue.url,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 1,
          MessageAttributeNames: ['All'],
          MessageSystemAttributeNames: ['All'],
        }),
      );
      messages.push(...Messages);
    }
    expect(messages).toHaveLength(3);
    const { handler } = await coldStart('consumer', () => import('../functions/consumer.js'), {
      CONSUMER_NAME: 'order-consumer',
    });
    const response = await handler(
      toSqsEvent(messages, queue.arn),
      lambdaContext(30_000, 'outbox-consumer') as never,
    );
    expect(response).toEqual({ batchItemFailures: [] });
    const { rows } = await db.pool.query(
      `SELECT (SELECT count(*)::int FROM processed_events WHERE consumer = 'order-consumer' AND event_id = ANY($1)) AS processed,
              (SELECT count(*)::int FROM order_notifications WHERE event_id = ANY($1)) AS notified`,
      [orders.map((o) => o.eventId)],
    );
    expect(rows[0]).toEqual({ processed: 3, notified: 3 });
    // A redelivery is a duplicate, seen through the consumer's own table.
    expect(
      await handler(toSqsEvent(messages.slice(0, 1), queue.arn), lambdaContext(30_000) as never),
    ).toEqual({
      batchItemFailures: [],
    });

    const consumer = as('consumer');
    await expect(consumer.query('UPDATE outbox_events SET processed_at = NULL')).rejects.toThrow(denied);
    await expect(consumer.query('DELETE FROM outbox_events')).rejects.toThrow(denied);
    await expect(consumer.query('SELECT payload FROM outbox_events')).rejects.toThrow(denied);
    await expect(
      consumer.query(`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
      VALUES (gen_random_uuid(), 'order', 'x', 'order.created', '{}')`),
    ).rejects.toThrow(denied);
    await expect(consumer.query('DELETE FROM processed_events')).rejects.toThrow(denied);
    await expect(consumer.query('UPDATE outbox_relay_slots SET holder = NULL')).rejects.toThrow(denied);
  });

  it('redrive resets a dead letter, discards another and replays a published event; it cannot delete rows or read dedupe rows', async () => {
    const [dead, published, discarded] = orders as [Order, Order, Order];
    await db.pool.query(
      `UPDATE outbox_events SET processed_at = NULL, dead_lettered_at = now(), attempts = 5, last_error = 'x' WHERE id = ANY($1)`,
      [[dead.eventId, discarded.eventId]],
    );
    await db.pool.query('UPDATE outbox_relay_wake SET woken_at = NULL');
    const { handler } = await coldStart('redrive', () => import('../functions/redrive.js'), {
      OUTBOX_RELAY_FUNCTION: 'pg-lambda-outbox-test-relay',
    });
    const context = lambdaContext(60_000, 'outbox-redrive') as never;
    await expect(handler({ ids: [dead.eventId], dryRun: true }, context)).resolves.toMatchObject({
      matched: 1,
    });
    await expect(handler({ ids: [dead.eventId] }, context)).resolves.toMatchObject({ reset: 1 });
    // Its wake looked for a running relay and left its mark (the invoke
    // itself fails here: the emulator has no such function).
    const { rows: marks } = await db.pool.query('SELECT woken_at FROM outbox_relay_wake');
    expect(marks[0]?.woken_at).toBeInstanceOf(Date);
    await expect(handler({ action: 'discard', ids: [discarded.eventId] }, context)).resolves.toMatchObject({
      discarded: 1,
    });
    await expect(handler({ action: 'replay', ids: [published.eventId] }, context)).resolves.toMatchObject({
      replayed: 1,
    });
    const { rows } = await db.pool.query(
      'SELECT id, dead_lettered_at, processed_at FROM outbox_events WHERE id = ANY($1) ORDER BY id',
      [[dead.eventId, published.eventId]],
    );
    expect(rows.every((r) => r.dead_lettered_at === null && r.processed_at === null)).toBe(true);
    await expect(as('redrive').query('DELETE FROM outbox_events')).rejects.toThrow(denied);
    await expect(as('redrive').query('SELECT * FROM processed_events')).rejects.toThrow(denied);
  });

  it('cleanup deletes published rows, old dedupe rows and replays by its retention; it cannot insert events', async () => {
    await db.pool.query(
      `UPDATE outbox_events SET processed_at = now() - interval '3 days', dead_lettered_at = NULL`,
    );
    await db.pool.query(`UPDATE processed_events SET processed_at = now() - interval '3 days'`);
    const { handler } = await coldStart('cleanup', () => import('../functions/cleanup.js'), {
      OUTBOX_RETENTION_DAYS: '1',
      PROCESSED_EVENTS_RETENTION_DAYS: '1',
    });
    const report = await handler({}, lambdaContext(60_000, 'outbox-cleanup') as never);
    expect(report).toMatchObject({
      finished: true,
      outboxEvents: { deleted: 3 },
      processedEvents: { deleted: 3 },
    });
    await expect(
      as('cleanup').query(`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
      VALUES (gen_random_uuid(), 'order', 'x', 'order.created', '{}')`),
    ).rejects.toThrow(denied);
    await expect(as('cleanup').query('SELECT * FROM orders')).rejects.toThrow(denied);
  });
});
