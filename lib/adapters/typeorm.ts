/**
 * `pg-lambda-outbox/typeorm`: TypeORM (the `postgres` driver) as the outbox's
 * database. {@link fromTypeORM} makes a TypeORM EntityManager or QueryRunner
 * a {@link Queryable}, so `enqueueEvents` writes in your TypeORM transaction;
 * {@link typeormTx} gives a consumer handler an EntityManager that runs
 * inside the consumer's transaction. TypeORM is imported only as types.
 */
import type { ClientBase } from 'pg';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import type { Queryable, QueryRows } from '../db/queryable.js';
import { confine } from './confine.js';

export type { Queryable } from '../db/queryable.js';

function isQueryRunner(value: EntityManager | QueryRunner): value is QueryRunner {
  // An EntityManager has release() too; only a query runner starts transactions.
  return typeof (value as Partial<QueryRunner>).startTransaction === 'function';
}

/**
 * Makes a TypeORM EntityManager (the one `dataSource.transaction(...)` hands
 * you, or `dataSource.manager`) or a QueryRunner a {@link Queryable}. The
 * `postgres` driver passes `$n` SQL to `pg` as it is. Inside a transaction,
 * statements run on its query runner; a manager outside one (each statement
 * then its own transaction) borrows a query runner per statement.
 *
 * @example
 * import { enqueueEvent } from 'pg-lambda-outbox';
 * import { fromTypeORM } from 'pg-lambda-outbox/typeorm';
 *
 * await dataSource.transaction(async (manager) => {
 *   await manager.insert(Order, { id: orderId, totalCents: 4200 });
 *   await enqueueEvent(fromTypeORM(manager), { aggregateType: 'order', aggregateId: orderId, eventType: 'order.placed', payload: { orderId } });
 * });
 */
export function fromTypeORM(entityManagerOrQueryRunner: EntityManager | QueryRunner): Queryable {
  const target = entityManagerOrQueryRunner;
  return {
    // biome-ignore lint/suspicious/noExplicitAny: rows are typed by the caller, as in pg
    async query<R = any>(text: string, values?: unknown[]): Promise<QueryRows<R>> {
      const runner = isQueryRunner(target) ? target : target.queryRunner;
      if (runner) return toRows(await runner.query(text, values, true));
      const borrowed = target.connection.createQueryRunner();
      try {
        return toRows(await borrowed.query(text, values, true));
      } finally {
        await borrowed.release();
      }
    },
  };
}

function toRows<R>(result: { records?: unknown[]; affected?: number | undefined }): QueryRows<R> {
  return { rows: (result.records ?? []) as R[], rowCount: result.affected ?? null };
}

/**
 * An EntityManager that runs every statement on the consumer's transaction
 * `tx` (the client a consumer handler receives), so the handler's TypeORM
 * writes (repositories, `save`, query builders) commit together with the
 * consumer's dedupe row, or not at all, under the consumer's deadline and
 * connection-loss handling. `dataSource` (initialized) supplies the entity
 * metadata; none of its pooled connections is used.
 *
 * TypeORM sees a transaction already open: `save` starts none of its own,
 * and `manager.transaction(...)` inside the handler becomes a savepoint.
 * Statements that would begin, commit or roll back a transaction are refused.
 *
 * @example
 * import { createConsumer } from 'pg-lambda-outbox/consumer';
 * import { typeormTx } from 'pg-lambda-outbox/typeorm';
 *
 * const consumer = createConsumer({
 *   name: 'receipts',
 *   pool,
 *   handlers: {
 *     'order.placed': async (event, tx) => {
 *       await typeormTx(dataSource, tx).insert(Receipt, { orderId: event.aggregateId, eventId: event.id });
 *     },
 *   },
 * });
 */
export function typeormTx(dataSource: DataSource, tx: ClientBase): EntityManager {
  const runner = dataSource.createQueryRunner();
  // A query runner connected to `tx` instead of a pooled connection, with its
  // transaction already open (depth 1: nested transactions are savepoints).
  // No release callback is set, so releasing the runner leaves `tx` alone.
  Object.assign(runner, {
    databaseConnection: { query: confine(tx, 'typeormTx') },
    isTransactionActive: true,
    transactionDepth: 1,
  });
  return runner.manager;
}
