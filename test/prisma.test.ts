// pg-lambda-outbox/prisma against Prisma 7 with its pg driver adapter
// (@prisma/adapter-pg) on a real PostgreSQL. The client is generated here,
// from test/support/prisma/schema.prisma into .local/prisma-client
// (git-ignored), offline: `prisma generate` only checks that a schema engine
// binary exists, never runs it, so PRISMA_SCHEMA_ENGINE_BINARY=/bin/false
// spares it the download (docs/orm-prisma.md). The tables are created with
// plain SQL, as `prisma migrate` needs that engine. Then: an event and an
// order in one `$transaction` (commit: both; rollback: neither), and a
// consumer handler writing through Prisma inside the dedupe transaction.
import { execFileSync } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Message } from '@aws-sdk/client-sqs';
import { PrismaPg } from '@prisma/adapter-pg';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPrisma, type PrismaRawQuery, prismaTx } from '../lib/adapters/prisma.js';
import { createConsumer } from '../lib/consumer/index.js';
import { migrate } from '../lib/db/migrate.js';
import { createOutbox, OutboxSchemaError } from '../lib/index.js';
import type { Envelope } from '../lib/publish/envelope.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { toSqsEvent } from './support/sqs-event.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const schemaFile = path.join(root, 'test/support/prisma/schema.prisma');
const clientDir = path.join(root, '.local/prisma-client');

// The generated client's shape, as far as this test uses it (its own types
// exist only once generated; the type check below uses them).
interface Order {
  id: string;
  customer: string;
  cents: number;
}
interface Models {
  order: {
    create(args: { data: Order }): Promise<Order>;
    upsert(args: {
      where: { id: string };
      create: Order;
      update: { cents: { increment: number } };
    }): Promise<Order>;
    count(args: { where: { id: string } }): Promise<number>;
  };
  receipt: {
    create(args: { data: { eventId: string; orderId: string } }): Promise<unknown>;
    count(args: { where: { eventId: string } }): Promise<number>;
  };
}
type Tx = Models & PrismaRawQuery;
interface Client extends Models {
  $transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  $disconnect(): Promise<void>;
}
type ClientClass = new (options: { adapter: PrismaPg }) => Client;

const prismaEnv = {
  ...process.env,
  PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false',
  CHECKPOINT_DISABLE: '1',
  PRISMA_HIDE_UPDATE_MESSAGE: '1',
};

let db: TestDatabase;
let PrismaClient: ClientClass;
let prisma: Client;
const outbox = createOutbox({ schema: 'outbox' });

beforeAll(async () => {
  execFileSync(path.join(root, 'node_modules/.bin/prisma'), ['generate', '--schema', schemaFile], {
    cwd: root,
    env: prismaEnv,
    stdio: 'pipe',
  });
  ({ PrismaClient } = await import(path.join(clientDir, 'client.ts')));
  db = await createTestDatabase({ migrate: false });
  await migrate({ databaseUrl: db.url, schema: 'outbox' });
  await db.pool.query(`
    CREATE TABLE orders (id uuid PRIMARY KEY, customer text NOT NULL, cents int NOT NULL);
    CREATE TABLE receipts (event_id uuid PRIMARY KEY, order_id uuid NOT NULL)`);
  prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: db.url }) });
});
afterAll(async () => {
  await prisma?.$disconnect();
  await db?.drop();
});

const count = async (sql: string, values: unknown[]) =>
  (await db.pool.query(`SELECT count(*)::int AS n FROM ${sql}`, values)).rows[0].n as number;
const events = (id: string) => count('"outbox".outbox_events WHERE id = $1', [id]);
const orders = (id: string) => count('orders WHERE id = $1', [id]);
const placed = (orderId: string, id?: string) => ({
  ...(id ? { id } : {}),
  aggregateType: 'order',
  aggregateId: orderId,
  eventType: 'order.placed',
  payload: { orderId },
});
class Abandon extends Error {}

describe('fromPrisma: events written in prisma.$transaction', () => {
  it('commits the event with the order', async () => {
    const orderId = randomUUID();
    const id = await prisma.$transaction(async (tx) => {
      await tx.order.create({ data: { id: orderId, customer: 'ada', cents: 1200 } });
      return outbox.enqueue(fromPrisma(tx), placed(orderId));
    });
    expect([await orders(orderId), await events(id)]).toEqual([1, 1]);
    const { rows } = await db.pool.query('SELECT payload FROM "outbox".outbox_events WHERE id = $1', [id]);
    expect(rows[0].payload).toEqual({ orderId });
  });

  it('several events in one call (array parameters through $queryRawUnsafe)', async () => {
    const orderId = randomUUID();
    const ids = await prisma.$transaction((tx) =>
      outbox.enqueueMany(fromPrisma(tx), [placed(orderId), placed(orderId), placed(`o,"'${orderId}`)]),
    );
    expect(await count('"outbox".outbox_events WHERE id = ANY($1::uuid[])', [ids])).toBe(3);
  });

  it('a rollback leaves neither the order nor the event', async () => {
    const orderId = randomUUID();
    let id = '';
    await expect(
      prisma.$transaction(async (tx) => {
        await tx.order.create({ data: { id: orderId, customer: 'ada', cents: 1200 } });
        id = await outbox.enqueue(fromPrisma(tx), placed(orderId));
        throw new Abandon();
      }),
    ).rejects.toBeInstanceOf(Abandon);
    expect(id).not.toBe('');
    expect([await orders(orderId), await events(id)]).toEqual([0, 0]);
  });

  it('a failing outbox INSERT rolls the order back too', async () => {
    const taken = await outbox.enqueue(db.pool, placed(randomUUID()));
    const orderId = randomUUID();
    await expect(
      prisma.$transaction(async (tx) => {
        await tx.order.create({ data: { id: orderId, customer: 'ada', cents: 1 } });
        await outbox.enqueue(fromPrisma(tx), placed(orderId, taken));
      }),
    ).rejects.toMatchObject({ code: 'P2010' });
    expect(await orders(orderId)).toBe(0);
  });

  it("a schema the outbox is not in: OutboxSchemaError from under Prisma's P2010", async () => {
    const error = await prisma
      .$transaction((tx) => createOutbox({ schema: 'nowhere' }).enqueue(fromPrisma(tx), placed(randomUUID())))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxSchemaError);
    expect((error as Error).message).toMatch(/looked in schema "nowhere"/);
    expect((error as Error).cause).toMatchObject({ code: 'P2010' });
  });
});

describe('prismaTx: a consumer handler writing with Prisma', () => {
  const prismaOn = (tx: pg.ClientBase) =>
    prismaTx(tx, (pool) => new PrismaClient({ adapter: new PrismaPg(pool) }));
  let fail = false;
  const consumer = () =>
    createConsumer({
      outbox,
      name: 'prisma-receipts',
      pool: db.pool,
      handlers: {
        'order.placed': async (event, tx) => {
          const { orderId } = event.payload as { orderId: string };
          const client = prismaOn(tx);
          await client.receipt.create({ data: { eventId: event.id, orderId } });
          // An upsert opens a transaction of Prisma's own: a savepoint here.
          await client.order.upsert({
            where: { id: orderId },
            create: { id: orderId, customer: 'from-event', cents: 1 },
            update: { cents: { increment: 1 } },
          });
          // A failing inner transaction undoes only its own writes.
          await client
            .$transaction(async (inner) => {
              await inner.order.create({ data: { id: randomUUID(), customer: 'inner', cents: 0 } });
              throw new Abandon();
            })
            .catch((e: unknown) => {
              if (!(e instanceof Abandon)) throw e;
            });
          if (fail) throw new Error('handler failed');
        },
      },
    });

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
    return toSqsEvent([message], 'arn:aws:sqs:us-east-1:000000000000:prisma');
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
  const receipts = (eventId: string) => count('receipts WHERE event_id = $1', [eventId]);
  const dedupe = (eventId: string) => count('"outbox".processed_events WHERE event_id = $1', [eventId]);

  it('commits its Prisma writes with the dedupe row; a redelivery is skipped', async () => {
    fail = false;
    const orderId = randomUUID();
    const envelope = envelopeOf(orderId);
    const before = await count('orders', []);
    expect(await consumer().handleSqsEvent(delivery(envelope))).toMatchObject({
      processed: 1,
      batchItemFailures: [],
    });
    expect([await receipts(envelope.id), await dedupe(envelope.id), await orders(orderId)]).toEqual([
      1, 1, 1,
    ]);
    // The inner transaction's order was undone, alone.
    expect(await count('orders', [])).toBe(before + 1);
    expect(await consumer().handleSqsEvent(delivery(envelope))).toMatchObject({ duplicates: 1 });
    expect(await receipts(envelope.id)).toBe(1);
  });

  it('a handler that throws after writing leaves neither its rows nor the dedupe row', async () => {
    fail = true;
    const orderId = randomUUID();
    const envelope = envelopeOf(orderId);
    const result = await consumer().handleSqsEvent(delivery(envelope));
    expect(result.batchItemFailures).toHaveLength(1);
    expect([await receipts(envelope.id), await dedupe(envelope.id), await orders(orderId)]).toEqual([
      0, 0, 0,
    ]);
  });
});

it("type-checks against the generated Prisma 7 client, with Prisma's own types and no casts", () => {
  const file = path.join(clientDir, 'types-check.ts');
  fs.writeFileSync(
    file,
    `import { PrismaPg } from '@prisma/adapter-pg';
import type pg from 'pg';
import { fromPrisma, prismaTx } from 'pg-lambda-outbox/prisma';
import type { Queryable } from 'pg-lambda-outbox';
import { type Prisma, PrismaClient } from './client.js';

declare const prisma: PrismaClient;
declare const consumerTx: pg.PoolClient;
export async function check(): Promise<void> {
  const a: Queryable = fromPrisma(prisma);
  await prisma.$transaction(async (tx) => {
    const b: Queryable = fromPrisma(tx);
    return [a, b];
  });
  const t = (tx: Prisma.TransactionClient): Queryable => fromPrisma(tx);
  const client: PrismaClient = prismaTx(consumerTx, (pool) => new PrismaClient({ adapter: new PrismaPg(pool) }));
  await client.receipt.count();
  void t;
}
`,
  );
  const config = path.join(clientDir, 'tsconfig.json');
  fs.writeFileSync(
    config,
    JSON.stringify({
      extends: '../../tsconfig.json',
      compilerOptions: { noEmit: true, skipLibCheck: true },
      include: [],
      files: ['types-check.ts'],
    }),
  );
  try {
    execFileSync(path.join(root, 'node_modules/.bin/tsc'), ['-p', config], { cwd: root, stdio: 'pipe' });
  } catch (error) {
    const { stdout, stderr } = error as { stdout: Buffer; stderr: Buffer };
    expect.fail(`tsc:\n${stdout}${stderr}`);
  }
}, 120_000);
