// The ORM adapters (lib/adapters/) against the real packages on a real
// PostgreSQL, the same cases for each of Drizzle, Kysely, Knex and TypeORM:
// the write side (an event enqueued in the ORM's transaction commits and rolls
// back with the ORM's business row) and the consumer side (a handler writing
// through the ORM inside the consumer's dedupe transaction).
import { createHash, randomUUID } from 'node:crypto';
import type { Message } from '@aws-sdk/client-sqs';
import type { SQSEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createConsumer } from '../lib/consumer/consumer.js';
import { TransactionTimeoutError } from '../lib/db/guarded-client.js';
import { enqueueEvent, enqueueEvents } from '../lib/outbox/enqueue.js';
import type { Envelope } from '../lib/publish/envelope.js';
import { useTestDatabase } from './support/database.js';
import { ORM_TABLES_SQL, type OrmUnderTest, ormsUnderTest } from './support/orm-clients.js';
import { toSqsEvent } from './support/sqs-event.js';

const db = useTestDatabase();
const orms: Record<string, OrmUnderTest> = {};

beforeAll(async () => {
  await db.pool.query(ORM_TABLES_SQL);
  for (const orm of ormsUnderTest(db.url)) orms[orm.name] = orm;
});

afterAll(async () => {
  await Promise.all(Object.values(orms).map((orm) => orm.close()));
});

async function count(sql: string, values: unknown[]): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${sql}`, values);
  return rows[0]?.n ?? 0;
}

const eventRows = (id: string) => count('outbox_events WHERE id = $1', [id]);
const orderRows = (id: string) => count('orm_orders WHERE id = $1', [id]);
const receiptRows = (eventId: string) => count('orm_receipts WHERE event_id = $1', [eventId]);
const dedupeRows = (consumer: string, eventId: string) =>
  count('processed_events WHERE consumer = $1 AND event_id = $2', [consumer, eventId]);

/** The messages of an error and its causes (Drizzle and TypeORM wrap the driver's error). */
function messages(error: unknown): string {
  const parts: string[] = [];
  for (let e = error as { message?: string; cause?: unknown; driverError?: unknown } | undefined; e; ) {
    parts.push(String(e.message));
    e = (e.cause ?? e.driverError) as typeof e;
  }
  return parts.join(' <- ');
}

function placed(orderId: string) {
  return { aggregateType: 'order', aggregateId: orderId, eventType: 'order.placed', payload: { orderId } };
}

/** One SQS record carrying `envelope`, as Lambda's event source mapping delivers it. */
function delivery(envelope: Envelope, receiveCount = 1): SQSEvent {
  const body = JSON.stringify(envelope);
  const now = String(Date.now());
  const message: Message = {
    MessageId: randomUUID(),
    ReceiptHandle: randomUUID(),
    Body: body,
    MD5OfBody: createHash('md5').update(body).digest('hex'),
    Attributes: {
      ApproximateReceiveCount: String(receiveCount),
      SentTimestamp: now,
      SenderId: 'AIDAEXAMPLE',
      ApproximateFirstReceiveTimestamp: now,
    },
  };
  return toSqsEvent([message], 'arn:aws:sqs:us-east-1:000000000000:orm-consumer');
}

function envelopeOf(orderId: string): Envelope<{ orderId: string }> {
  return {
    id: randomUUID(),
    type: 'order.placed',
    aggregateType: 'order',
    aggregateId: orderId,
    occurredAt: new Date().toISOString(),
    payload: { orderId },
    headers: {},
  };
}

describe.each(['drizzle', 'kysely', 'knex', 'typeorm'])('%s', (name) => {
  const orm = () => orms[name] as OrmUnderTest;

  describe('write side: enqueue in the ORM transaction', () => {
    it('commits the event with the business row', async () => {
      const orderId = randomUUID();
      const eventId = await orm().transaction(async (q, insertOrder) => {
        await insertOrder(orderId);
        return enqueueEvent(q, placed(orderId));
      });
      expect(await orderRows(orderId)).toBe(1);
      expect(await eventRows(eventId)).toBe(1);
    });

    it('writes many events in one call, aggregates locked first', async () => {
      const orderId = randomUUID();
      const ids = await orm().transaction(async (q, insertOrder) => {
        await insertOrder(orderId);
        return enqueueEvents(q, [placed(orderId), placed(orderId), placed(randomUUID())]);
      });
      expect(await count('outbox_events WHERE id = ANY($1::uuid[])', [ids])).toBe(3);
      const { rows } = await db.pool.query(
        'SELECT aggregate_id, seq FROM outbox_events WHERE id = ANY($1::uuid[]) ORDER BY seq',
        [ids],
      );
      expect(rows.filter((r) => r.aggregate_id === orderId)).toHaveLength(2);
    });

    it('rolls back the event with the business row (the ORM`s explicit rollback)', async () => {
      const orderId = randomUUID();
      let eventId = '';
      await orm().rollback(async (q, insertOrder) => {
        await insertOrder(orderId);
        eventId = await enqueueEvent(q, placed(orderId));
        expect(await eventRows(eventId)).toBe(0); // not visible outside before commit either
      });
      expect(eventId).not.toBe('');
      expect(await orderRows(orderId)).toBe(0);
      expect(await eventRows(eventId)).toBe(0);
    });

    it('an error thrown inside the transaction leaves neither row and surfaces unchanged', async () => {
      const orderId = randomUUID();
      const failure = new Error('payment declined');
      let eventId = '';
      await expect(
        orm().transaction(async (q, insertOrder) => {
          await insertOrder(orderId);
          eventId = await enqueueEvent(q, placed(orderId));
          throw failure;
        }),
      ).rejects.toBe(failure);
      expect(await orderRows(orderId)).toBe(0);
      expect(await eventRows(eventId)).toBe(0);
    });

    it('a database error from enqueue rolls back the transaction and surfaces', async () => {
      const orderId = randomUUID();
      const eventId = randomUUID();
      await orm().transaction((q) => enqueueEvent(q, { ...placed(orderId), id: eventId }));
      await expect(
        orm().transaction(async (q, insertOrder) => {
          await insertOrder(orderId);
          await enqueueEvent(q, { ...placed(orderId), id: eventId }); // the id is taken
        }),
      ).rejects.toSatisfy((error) => /duplicate key/.test(messages(error)));
      expect(await orderRows(orderId)).toBe(0);
    });

    it('is a faithful Queryable: repeated $n, literal ? and $n in literals, comments, arrays, rowCount', async () => {
      const q = orm().plain();
      const { rows } = await q.query<Record<string, unknown>>(
        `SELECT $1::int + $1::int AS twice, -- $2 in a comment
                '$1 ?' AS literal, "?column?$" AS quoted, $tag$ $2 ? $tag$ AS dollar,
                '{"a": 1}'::jsonb ? 'a' AS has_key, /* nested /* $1 */ ? */ $2::text[] AS arr,
                E'it\\'s $1' AS escaped
         FROM (SELECT 1 AS "?column?$") AS t`,
        [21, ['x', 'y?']],
      );
      expect(rows).toEqual([
        {
          twice: 42,
          literal: '$1 ?',
          quoted: 1,
          dollar: ' $2 ? ',
          has_key: true,
          arr: ['x', 'y?'],
          escaped: "it's $1",
        },
      ]);
      const orderA = randomUUID();
      const orderB = randomUUID();
      const inserted = await q.query('INSERT INTO orm_orders (id, orm) VALUES ($1, $3), ($2, $3)', [
        orderA,
        orderB,
        name,
      ]);
      expect(inserted.rowCount).toBe(2);
      const updated = await q.query('UPDATE orm_orders SET orm = $1 WHERE id = ANY($2::uuid[])', [
        `${name}!`,
        [orderA, orderB],
      ]);
      expect(updated.rowCount).toBe(2);
      const none = await q.query('UPDATE orm_orders SET orm = $1 WHERE false', ['x']);
      expect(none.rowCount).toBe(0);
    });
  });

  describe('consumer side: a handler writing through the ORM in the dedupe transaction', () => {
    const consumerName = `orm-${name}`;

    it('commits the handler`s ORM write with the dedupe row; a redelivery is skipped', async () => {
      let calls = 0;
      const consumer = createConsumer({
        name: consumerName,
        pool: db.pool,
        handlers: {
          'order.placed': async (event: Envelope<{ orderId: string }>, tx) => {
            calls++;
            await orm().writeReceipt(tx, event.id, event.payload.orderId);
          },
        },
      });
      const envelope = envelopeOf(randomUUID());
      const first = await consumer.handleSqsEvent(delivery(envelope), { remainingMs: () => 30_000 });
      expect(first.batchItemFailures).toEqual([]);
      expect(first.outcomes.map((o) => o.status)).toEqual(['processed']);
      expect(await receiptRows(envelope.id)).toBe(1);
      expect(await dedupeRows(consumerName, envelope.id)).toBe(1);

      const again = await consumer.handleSqsEvent(delivery(envelope, 2));
      expect(again.outcomes.map((o) => o.status)).toEqual(['duplicate']);
      expect(calls).toBe(1);
      expect(await receiptRows(envelope.id)).toBe(1);
    });

    it('a handler error after the ORM write leaves neither the dedupe row nor the business row', async () => {
      const failure = new Error('downstream refused');
      const consumer = createConsumer({
        name: consumerName,
        pool: db.pool,
        handlers: {
          'order.placed': async (event: Envelope<{ orderId: string }>, tx) => {
            await orm().writeReceipt(tx, event.id, event.payload.orderId);
            throw failure;
          },
        },
      });
      const envelope = envelopeOf(randomUUID());
      const result = await consumer.handleSqsEvent(delivery(envelope));
      expect(result.outcomes).toMatchObject([{ status: 'failed', error: failure }]);
      expect(result.batchItemFailures).toHaveLength(1);
      expect(await receiptRows(envelope.id)).toBe(0);
      expect(await dedupeRows(consumerName, envelope.id)).toBe(0);
    });

    it('the ORM`s own transaction() in a handler is a savepoint: kept with the dedupe row', async () => {
      const consumer = createConsumer({
        name: consumerName,
        pool: db.pool,
        handlers: {
          'order.placed': async (event: Envelope<{ orderId: string }>, tx) => {
            await orm().nestedTransaction(tx, event.id, event.payload.orderId);
          },
        },
      });
      const envelope = envelopeOf(randomUUID());
      const result = await consumer.handleSqsEvent(delivery(envelope));
      expect(result.outcomes.map((o) => o.status)).toEqual(['processed']);
      expect(await receiptRows(envelope.id)).toBe(1);
      expect(await dedupeRows(consumerName, envelope.id)).toBe(1);
    });

    it('an inner transaction that fails undoes only its own writes', async () => {
      const consumer = createConsumer({
        name: consumerName,
        pool: db.pool,
        handlers: {
          'order.placed': async (event: Envelope<{ orderId: string }>, tx) => {
            const inner = new Error('inner failure');
            await expect(orm().nestedTransaction(tx, event.id, event.payload.orderId, inner)).rejects.toBe(
              inner,
            );
            // The consumer's transaction is still usable and commits.
            await tx.query('INSERT INTO orm_orders (id, orm) VALUES ($1, $2)', [event.payload.orderId, name]);
          },
        },
      });
      const envelope = envelopeOf(randomUUID());
      const result = await consumer.handleSqsEvent(delivery(envelope));
      expect(result.outcomes.map((o) => o.status)).toEqual(['processed']);
      expect(await receiptRows(envelope.id)).toBe(0);
      expect(await orderRows(envelope.payload.orderId)).toBe(1);
      expect(await dedupeRows(consumerName, envelope.id)).toBe(1);
    });

    it('a handler error after an inner transaction "committed" leaves nothing', async () => {
      const consumer = createConsumer({
        name: consumerName,
        pool: db.pool,
        handlers: {
          'order.placed': async (event: Envelope<{ orderId: string }>, tx) => {
            await orm().nestedTransaction(tx, event.id, event.payload.orderId);
            throw new Error('after the inner transaction');
          },
        },
      });
      const envelope = envelopeOf(randomUUID());
      const result = await consumer.handleSqsEvent(delivery(envelope));
      expect(result.outcomes.map((o) => o.status)).toEqual(['failed']);
      expect(await receiptRows(envelope.id)).toBe(0);
      expect(await dedupeRows(consumerName, envelope.id)).toBe(0);
    });

    it('a COMMIT or an isolation level sent through the ORM is refused', async () => {
      const errors: unknown[] = [];
      const consumer = createConsumer({
        name: consumerName,
        pool: db.pool,
        handlers: {
          'order.placed': async (event: Envelope<{ orderId: string }>, tx) => {
            await orm().writeReceipt(tx, event.id, event.payload.orderId);
            for (const text of ['COMMIT', 'start transaction isolation level serializable']) {
              await orm()
                .raw(tx, text)
                .catch((error) => errors.push(error));
            }
            throw new Error('roll back');
          },
        },
      });
      const envelope = envelopeOf(randomUUID());
      await consumer.handleSqsEvent(delivery(envelope));
      expect(errors.map(messages)).toEqual([
        expect.stringMatching(/refused/),
        expect.stringMatching(/refused/),
      ]);
      expect(await receiptRows(envelope.id)).toBe(0);
      expect(await dedupeRows(consumerName, envelope.id)).toBe(0);
    });

    it('statements through the ORM are cut off at the consumer`s deadline', async () => {
      const consumer = createConsumer({
        name: consumerName,
        pool: db.pool,
        safetyMarginMs: 1000,
        handlers: {
          'order.placed': async (event: Envelope<{ orderId: string }>, tx) => {
            await orm().writeReceipt(tx, event.id, event.payload.orderId);
            await orm().raw(tx, 'SELECT pg_sleep(5)');
          },
        },
      });
      const envelope = envelopeOf(randomUUID());
      const started = Date.now();
      const result = await consumer.handleSqsEvent(delivery(envelope), { remainingMs: () => 1500 });
      expect(Date.now() - started).toBeLessThan(2500);
      expect(result.outcomes.map((o) => o.status)).toEqual(['failed']);
      expect(result.outcomes[0]?.error).toBeInstanceOf(TransactionTimeoutError);
      expect(await receiptRows(envelope.id)).toBe(0);
      expect(await dedupeRows(consumerName, envelope.id)).toBe(0);
    });
  });
});
