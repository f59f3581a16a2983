// The outbox handle (createOutbox) and OUTBOX_SCHEMA: the schema said once,
// for writes, consumers and operations, in a database whose service already
// has a table of its own named outbox_events (in public) while the outbox
// lives in schema `outbox`. Where the schema is not said, the error names the
// schema looked in and the fix instead of PostgreSQL's bare "does not exist".
import { createHash, randomUUID } from 'node:crypto';
import type { Message } from '@aws-sdk/client-sqs';
import { drizzle } from 'drizzle-orm/node-postgres';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { fromDrizzle } from '../lib/adapters/drizzle.js';
import { createConsumer } from '../lib/consumer/index.js';
import { defineEvents } from '../lib/contracts/index.js';
import { migrate } from '../lib/db/migrate.js';
import { withTransaction } from '../lib/db/transaction.js';
import { ConfigError, createOutbox, enqueueEvent, OutboxSchemaError } from '../lib/index.js';
import { listDeadLetters, outboxStats, redriveDeadLetters } from '../lib/operations/index.js';
import type { Envelope } from '../lib/publish/envelope.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { toSqsEvent } from './support/sqs-event.js';

let db: TestDatabase;
const schema = 'outbox';

beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
  // The service's own tables, one of them named like the outbox's.
  await db.pool.query(`
    CREATE TABLE orders (id uuid PRIMARY KEY);
    CREATE TABLE receipts (event_id uuid PRIMARY KEY);
    CREATE TABLE outbox_events (msg_id serial PRIMARY KEY, topic text NOT NULL)`);
  await migrate({ databaseUrl: db.url, schema });
});
afterAll(async () => {
  await db?.drop();
});
afterEach(() => {
  delete process.env.OUTBOX_SCHEMA;
});

const placed = (orderId: string) => ({
  aggregateType: 'order',
  aggregateId: orderId,
  eventType: 'order.placed',
  payload: { orderId },
});

async function outboxRows(ids: string[]): Promise<number> {
  const { rows } = await db.pool.query(
    'SELECT count(*)::int AS n FROM "outbox".outbox_events WHERE id = ANY($1::uuid[])',
    [ids],
  );
  return rows[0].n;
}

/** One SQS record carrying `envelope`, as Lambda delivers it. */
function delivery(envelope: Envelope) {
  const body = JSON.stringify(envelope);
  const now = String(Date.now());
  const message: Message = {
    MessageId: randomUUID(),
    ReceiptHandle: randomUUID(),
    Body: body,
    MD5OfBody: createHash('md5').update(body).digest('hex'),
    Attributes: {
      ApproximateReceiveCount: '1',
      SentTimestamp: now,
      SenderId: 'AIDAEXAMPLE',
      ApproximateFirstReceiveTimestamp: now,
    },
  };
  return toSqsEvent([message], 'arn:aws:sqs:us-east-1:000000000000:handle');
}

const envelopeOf = (orderId: string): Envelope => ({
  id: randomUUID(),
  type: 'order.placed',
  aggregateType: 'order',
  aggregateId: orderId,
  occurredAt: new Date().toISOString(),
  payload: { orderId },
  headers: {},
});

describe('createOutbox: the schema said once', () => {
  const outbox = createOutbox({ schema });

  it('writes in its schema, with the business row, or not at all', async () => {
    expect(outbox.schema).toBe('outbox');
    const orderId = randomUUID();
    const ids = await withTransaction(db.pool, async (client) => {
      await client.query('INSERT INTO orders (id) VALUES ($1)', [orderId]);
      const one = await outbox.enqueue(client, placed(orderId));
      const more = await outbox.enqueueMany(client, [placed(orderId), placed(randomUUID())], {
        lockAggregates: false,
      });
      return [one, ...more];
    });
    expect(await outboxRows(ids)).toBe(3);

    const dropped = randomUUID();
    let id = '';
    await expect(
      withTransaction(db.pool, async (client) => {
        await client.query('INSERT INTO orders (id) VALUES ($1)', [dropped]);
        id = await outbox.enqueue(client, placed(dropped));
        throw new Error('abandon');
      }),
    ).rejects.toThrow('abandon');
    expect(await outboxRows([id])).toBe(0);
    expect((await db.pool.query('SELECT 1 FROM orders WHERE id = $1', [dropped])).rowCount).toBe(0);
    // The service's own outbox_events is left alone.
    expect((await db.pool.query('SELECT count(*)::int AS n FROM public.outbox_events')).rows[0].n).toBe(0);
  });

  it('gives its schema to a consumer: the dedupe row lands in it', async () => {
    const consumer = createConsumer({
      outbox,
      name: 'receipts',
      pool: db.pool,
      handlers: {
        'order.placed': async (event, tx) => {
          await tx.query('INSERT INTO receipts (event_id) VALUES ($1)', [event.id]);
        },
      },
    });
    const envelope = envelopeOf(randomUUID());
    const first = await consumer.handleSqsEvent(delivery(envelope));
    expect(first).toMatchObject({ processed: 1, batchItemFailures: [] });
    expect((await consumer.handleSqsEvent(delivery(envelope))).duplicates).toBe(1);
    const { rows } = await db.pool.query(
      'SELECT consumer FROM "outbox".processed_events WHERE event_id = $1',
      [envelope.id],
    );
    expect(rows).toEqual([{ consumer: 'receipts' }]);
    expect(() =>
      createConsumer({ outbox, schema: 'other', name: 'x', pool: db.pool, handlers: { a: async () => {} } }),
    ).toThrow(ConfigError);
  });

  it('runs the operations in its schema', async () => {
    const orderId = randomUUID();
    const id = await outbox.enqueue(db.pool, placed(orderId));
    await db.pool.query(
      `UPDATE "outbox".outbox_events SET dead_lettered_at = now(), last_error = 'test' WHERE id = $1`,
      [id],
    );
    const stats = await outbox.status(db.pool);
    expect(stats.deadLetters).toBeGreaterThanOrEqual(1);
    const page = await outbox.listDeadLetters(db.pool, { limit: 10 });
    expect(page.rows.map((r) => r.id)).toContain(id);
    const redriven = await outbox.redrive(db.pool, { ids: [id], requestedBy: 'test' });
    expect(redriven).toMatchObject({ reset: 1, ids: [id] });
    expect(await outbox.listReplays(db.pool)).toEqual([]);
    const report = await outbox.cleanup({ db: db.pool }, { remainingMs: () => 60_000 });
    expect(report.finished).toBe(true);
  });

  it('with contracts, writes contract events in its schema', async () => {
    const events = defineEvents({
      'order.placed': { schema: z.object({ orderId: z.uuid() }), aggregateType: 'order' },
    });
    const typed = createOutbox({ schema, contracts: events });
    const orderId = randomUUID();
    const id = await typed.enqueue(db.pool, 'order.placed', { aggregateId: orderId, payload: { orderId } });
    // @ts-expect-error a payload that breaks the contract does not compile
    await expect(typed.enqueue(db.pool, 'order.placed', { aggregateId: 'x', payload: {} })).rejects.toThrow(
      /payload\.orderId/,
    );
    const { rows } = await db.pool.query('SELECT headers FROM "outbox".outbox_events WHERE id = $1', [id]);
    expect(rows[0].headers).toMatchObject({ 'event-version': '1' });
    expect(
      await typed.enqueueMany(db.pool, [
        { type: 'order.placed', aggregateId: orderId, payload: { orderId } },
      ]),
    ).toHaveLength(1);
  });

  it('refuses an unknown option and a malformed schema', () => {
    expect(() => createOutbox({ shema: 'outbox' } as never)).toThrow(/shema: unknown outbox option/);
    expect(() => createOutbox({ schema: 'out box' })).toThrow(ConfigError);
  });
});

describe('OUTBOX_SCHEMA: the default of every entry point', () => {
  it('is read by enqueueEvent, the consumer, the operations and createOutbox', async () => {
    process.env.OUTBOX_SCHEMA = schema;
    const id = await enqueueEvent(db.pool, placed(randomUUID()));
    expect(await outboxRows([id])).toBe(1);
    expect(createOutbox().schema).toBe(schema);
    expect((await outboxStats(db.pool)).pending).toBeGreaterThanOrEqual(1);
    expect((await listDeadLetters(db.pool, { limit: 1 })).total).toBeGreaterThanOrEqual(0);
    expect(await redriveDeadLetters(db.pool, { ids: [id], dryRun: true })).toMatchObject({ matched: 0 });
    const consumer = createConsumer({
      name: 'env',
      pool: db.pool,
      handlers: { 'order.placed': async () => {} },
    });
    const envelope = envelopeOf(randomUUID());
    expect(await consumer.handleSqsEvent(delivery(envelope))).toMatchObject({ processed: 1 });
    const { rows } = await db.pool.query('SELECT 1 FROM "outbox".processed_events WHERE event_id = $1', [
      envelope.id,
    ]);
    expect(rows).toHaveLength(1);
    process.env.OUTBOX_SCHEMA = 'bad name';
    await expect(enqueueEvent(db.pool, placed(randomUUID()))).rejects.toThrow(/OUTBOX_SCHEMA/);
  });
});

describe('the schema not said: an error that names where it looked and the fix', () => {
  it('no outbox table through search_path: a missing table', async () => {
    const error = await enqueueEvent(db.pool, placed(randomUUID())).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxSchemaError);
    const e = error as OutboxSchemaError;
    expect(e).toMatchObject({ code: '42P01', schema: undefined, missing: 'outbox_aggregate_locks' });
    expect(e.message).toMatch(/outbox table outbox_aggregate_locks not found/);
    expect(e.message).toMatch(/search_path/);
    expect(e.message).toMatch(/createOutbox\(\{ schema \}\)/);
    expect(e.message).toMatch(/migrate --schema/);
    expect(e.message).not.toMatch(/INSERT|SELECT/);
    expect((e.cause as { code?: string }).code).toBe('42P01');
  });

  it("the service's own outbox_events found through search_path: a missing column", async () => {
    const error = await enqueueEvent(db.pool, placed(randomUUID()), { lockAggregates: false }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutboxSchemaError);
    const e = error as OutboxSchemaError;
    expect(e).toMatchObject({ code: '42703', schema: undefined });
    expect(e.message).toMatch(/not the outbox's \(one of your own with the same name\?\)/);
    expect(e.message).toMatch(/createOutbox\(\{ schema \}\)/);
    expect(e.message).not.toMatch(/INSERT|SELECT/);
    expect((e.cause as { code?: string }).code).toBe('42703');
    // The service's table is untouched.
    expect((await db.pool.query('SELECT count(*)::int AS n FROM public.outbox_events')).rows[0].n).toBe(0);
  });

  it('a schema the outbox is not in: a missing table, named with the schema', async () => {
    const elsewhere = createOutbox({ schema: 'nowhere' });
    const error = await elsewhere.enqueue(db.pool, placed(randomUUID())).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxSchemaError);
    expect((error as OutboxSchemaError).code).toBe('42P01');
    expect((error as Error).message).toMatch(/looked in schema "nowhere"/);
    expect((error as Error).message).toMatch(/migrate --schema nowhere/);
    await expect(elsewhere.status(db.pool)).rejects.toThrow(OutboxSchemaError);
    await expect(elsewhere.redrive(db.pool, { all: true, dryRun: true })).rejects.toThrow(OutboxSchemaError);
    await expect(elsewhere.listDeadLetters(db.pool, { limit: 1 })).rejects.toThrow(/schema "nowhere"/);
    // The consumer's dedupe statement says the same.
    const consumer = createConsumer({
      outbox: elsewhere,
      name: 'receipts',
      pool: db.pool,
      handlers: { 'order.placed': async () => {} },
    });
    const result = await consumer.handleSqsEvent(delivery(envelopeOf(randomUUID())));
    expect(result.batchItemFailures).toHaveLength(1);
    expect(result.outcomes[0]?.error).toBeInstanceOf(OutboxSchemaError);
    expect(result.outcomes[0]?.error?.message).toMatch(/looked in schema "nowhere"/);
  });

  it('through an ORM, under its wrapper (Drizzle)', async () => {
    const error = await drizzle(db.pool)
      .transaction((tx) => enqueueEvent(fromDrizzle(tx), placed(randomUUID())))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxSchemaError);
    expect((error as Error).message).not.toMatch(/INSERT/);
  });
});
