// Test support: the four ORMs of lib/adapters/, each against one database,
// behind one shape so test/orm-adapters.test.ts can run the same cases on
// every one of them. Each writes its business row with its own query builder,
// not with SQL handed through.
import { sql, TransactionRollbackError } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { pgTable, text, uuid } from 'drizzle-orm/pg-core';
import knexFactory from 'knex';
import { CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { DataSource, EntitySchema } from 'typeorm';
import { drizzleTx, fromDrizzle } from '../../lib/adapters/drizzle.js';
import { fromKnex, knexTx } from '../../lib/adapters/knex.js';
import { fromKysely, kyselyTx } from '../../lib/adapters/kysely.js';
import { fromTypeORM, typeormTx } from '../../lib/adapters/typeorm.js';
import type { Queryable } from '../../lib/db/queryable.js';

/** The business tables the ORM tests write to. */
export const ORM_TABLES_SQL = `
CREATE TABLE orm_orders (id uuid PRIMARY KEY, orm text NOT NULL);
CREATE TABLE orm_receipts (event_id uuid PRIMARY KEY, order_id uuid NOT NULL, orm text NOT NULL);`;

/** One ORM, connected to the test database. */
export interface OrmUnderTest {
  readonly name: 'drizzle' | 'kysely' | 'knex' | 'typeorm';
  /**
   * Runs `fn` in the ORM's own transaction: `q` is the adapter's Queryable of
   * that transaction, `insertOrder` writes a business row through the ORM.
   * Commits when `fn` resolves, rolls back and rethrows when it throws.
   */
  transaction<T>(fn: (q: Queryable, insertOrder: (id: string) => Promise<void>) => Promise<T>): Promise<T>;
  /** Like `transaction`, but ends with the ORM's explicit rollback instead of a commit. */
  rollback(fn: (q: Queryable, insertOrder: (id: string) => Promise<void>) => Promise<void>): Promise<void>;
  /** The adapter's Queryable of the ORM's plain (non-transaction) database object. */
  plain(): Queryable;
  /** A consumer handler's write: a receipt row through the ORM, on the consumer's client `tx`. */
  writeReceipt(tx: pg.ClientBase, eventId: string, orderId: string): Promise<void>;
  /**
   * The ORM's own `transaction()` on the consumer's client, writing a receipt;
   * throws `fail` inside it after the write when given.
   */
  nestedTransaction(tx: pg.ClientBase, eventId: string, orderId: string, fail?: Error): Promise<void>;
  /** SQL text through the ORM's raw query call, on the consumer's client. */
  raw(tx: pg.ClientBase, text: string): Promise<unknown>;
  close(): Promise<void>;
}

const ordersTable = pgTable('orm_orders', { id: uuid('id').primaryKey(), orm: text('orm').notNull() });
const receiptsTable = pgTable('orm_receipts', {
  eventId: uuid('event_id').primaryKey(),
  orderId: uuid('order_id').notNull(),
  orm: text('orm').notNull(),
});

function drizzleOrm(url: string): OrmUnderTest {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const db = drizzle(pool);
  type Tx = Parameters<Parameters<typeof db.transaction>[0]>[0];
  const insert = (tx: Tx) => async (id: string) => {
    await tx.insert(ordersTable).values({ id, orm: 'drizzle' });
  };
  return {
    name: 'drizzle',
    transaction: (fn) => db.transaction((tx) => fn(fromDrizzle(tx), insert(tx))),
    rollback: async (fn) => {
      try {
        await db.transaction(async (tx) => {
          await fn(fromDrizzle(tx), insert(tx));
          tx.rollback();
        });
      } catch (error) {
        if (!(error instanceof TransactionRollbackError)) throw error;
      }
    },
    plain: () => fromDrizzle(db),
    writeReceipt: async (tx, eventId, orderId) => {
      await drizzleTx(tx).insert(receiptsTable).values({ eventId, orderId, orm: 'drizzle' });
    },
    nestedTransaction: async (tx, eventId, orderId, fail) => {
      await drizzleTx(tx).transaction(async (inner) => {
        await inner.insert(receiptsTable).values({ eventId, orderId, orm: 'drizzle' });
        if (fail) throw fail;
      });
    },
    raw: (tx, text) => drizzleTx(tx).execute(sql.raw(text)),
    close: () => pool.end(),
  };
}

interface KyselyDatabase {
  orm_orders: { id: string; orm: string };
  orm_receipts: { event_id: string; order_id: string; orm: string };
}

function kyselyOrm(url: string): OrmUnderTest {
  const db = new Kysely<KyselyDatabase>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 2 }) }),
  });
  const insert = (trx: Kysely<KyselyDatabase>) => async (id: string) => {
    await trx.insertInto('orm_orders').values({ id, orm: 'kysely' }).execute();
  };
  return {
    name: 'kysely',
    transaction: (fn) => db.transaction().execute((trx) => fn(fromKysely(trx), insert(trx))),
    rollback: async (fn) => {
      const trx = await db.startTransaction().execute();
      await fn(fromKysely(trx), insert(trx));
      await trx.rollback().execute();
    },
    plain: () => fromKysely(db),
    writeReceipt: async (tx, eventId, orderId) => {
      await kyselyTx<KyselyDatabase>(tx)
        .insertInto('orm_receipts')
        .values({ event_id: eventId, order_id: orderId, orm: 'kysely' })
        .execute();
    },
    nestedTransaction: async (tx, eventId, orderId, fail) => {
      await kyselyTx<KyselyDatabase>(tx)
        .transaction()
        .execute(async (trx) => {
          await trx
            .insertInto('orm_receipts')
            .values({ event_id: eventId, order_id: orderId, orm: 'kysely' })
            .execute();
          if (fail) throw fail;
        });
    },
    raw: (tx, text) => kyselyTx(tx).executeQuery(CompiledQuery.raw(text)),
    close: () => db.destroy(),
  };
}

function knexOrm(url: string): OrmUnderTest {
  const knex = knexFactory({ client: 'pg', connection: url, pool: { min: 0, max: 2 } });
  const insert = (trx: typeof knex) => async (id: string) => {
    await trx('orm_orders').insert({ id, orm: 'knex' });
  };
  return {
    name: 'knex',
    transaction: (fn) => knex.transaction((trx) => fn(fromKnex(trx), insert(trx))),
    rollback: async (fn) => {
      const trx = await knex.transaction();
      await fn(fromKnex(trx), insert(trx));
      await trx.rollback();
    },
    plain: () => fromKnex(knex),
    writeReceipt: async (tx, eventId, orderId) => {
      await knexTx(knex, tx)('orm_receipts').insert({ event_id: eventId, order_id: orderId, orm: 'knex' });
    },
    nestedTransaction: async (tx, eventId, orderId, fail) => {
      await knexTx(knex, tx).transaction(async (trx) => {
        await trx('orm_receipts').insert({ event_id: eventId, order_id: orderId, orm: 'knex' });
        if (fail) throw fail;
      });
    },
    raw: async (tx, text) => knexTx(knex, tx).raw(text),
    close: () => knex.destroy(),
  };
}

interface TypeormReceipt {
  eventId: string;
  orderId: string;
  orm: string;
}

const TypeormOrder = new EntitySchema<{ id: string; orm: string }>({
  name: 'OrmOrder',
  tableName: 'orm_orders',
  columns: { id: { type: 'uuid', primary: true }, orm: { type: 'text' } },
});
const TypeormReceiptEntity = new EntitySchema<TypeormReceipt>({
  name: 'OrmReceipt',
  tableName: 'orm_receipts',
  columns: {
    eventId: { name: 'event_id', type: 'uuid', primary: true },
    orderId: { name: 'order_id', type: 'uuid' },
    orm: { type: 'text' },
  },
});

function typeormOrm(url: string): OrmUnderTest {
  const dataSource = new DataSource({
    type: 'postgres',
    url,
    entities: [TypeormOrder, TypeormReceiptEntity],
    poolSize: 2,
  });
  let initialized: Promise<DataSource> | undefined;
  const ready = () => {
    initialized ??= dataSource.initialize();
    return initialized;
  };
  return {
    name: 'typeorm',
    transaction: async (fn) => {
      await ready();
      return dataSource.transaction((manager) =>
        fn(fromTypeORM(manager), async (id) => {
          await manager.insert(TypeormOrder, { id, orm: 'typeorm' });
        }),
      );
    },
    rollback: async (fn) => {
      await ready();
      const runner = dataSource.createQueryRunner();
      try {
        await runner.startTransaction();
        await fn(fromTypeORM(runner), async (id) => {
          await runner.manager.insert(TypeormOrder, { id, orm: 'typeorm' });
        });
        await runner.rollbackTransaction();
      } finally {
        await runner.release();
      }
    },
    plain: () => fromTypeORM(dataSource.manager),
    writeReceipt: async (tx, eventId, orderId) => {
      await ready();
      // A repository's save: TypeORM would wrap it in a transaction of its own
      // if it did not see the consumer's as open.
      await typeormTx(dataSource, tx)
        .getRepository(TypeormReceiptEntity)
        .save({ eventId, orderId, orm: 'typeorm' });
    },
    nestedTransaction: async (tx, eventId, orderId, fail) => {
      await ready();
      await typeormTx(dataSource, tx).transaction(async (manager) => {
        await manager.insert(TypeormReceiptEntity, { eventId, orderId, orm: 'typeorm' });
        if (fail) throw fail;
      });
    },
    raw: async (tx, text) => {
      await ready();
      return typeormTx(dataSource, tx).query(text);
    },
    close: async () => {
      if (initialized) await (await initialized).destroy();
    },
  };
}

/** Every ORM with an adapter, connected to `url`. */
export function ormsUnderTest(url: string): OrmUnderTest[] {
  return [drizzleOrm(url), kyselyOrm(url), knexOrm(url), typeormOrm(url)];
}
