/**
 * `pg-lambda-outbox/kysely`: Kysely as the outbox's database.
 * {@link fromKysely} makes a Kysely transaction (or instance) a
 * {@link Queryable}, so `enqueueEvents` writes in your Kysely transaction;
 * {@link kyselyTx} gives a consumer handler a Kysely that runs inside the
 * consumer's transaction.
 */
import { CompiledQuery, Kysely, type KyselyConfig, PostgresDialect, type PostgresPoolClient } from 'kysely';
import type { ClientBase } from 'pg';
import type { Queryable, QueryRows } from '../db/queryable.js';
import { confine } from './confine.js';

export type { Queryable } from '../db/queryable.js';

/**
 * Makes a Kysely transaction (or a Kysely instance, each statement then its
 * own transaction) a {@link Queryable}. The SQL goes to the dialect's driver
 * as it is (`CompiledQuery.raw`), so this fits the PostgreSQL dialects whose
 * placeholders are `$n` (`PostgresDialect`, and the ones built on `pg`).
 * `rowCount` is Kysely's `numAffectedRows` (inserts, updates, deletes), `null`
 * for other statements.
 *
 * @example
 * import { enqueueEvent } from 'pg-lambda-outbox';
 * import { fromKysely } from 'pg-lambda-outbox/kysely';
 *
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values({ id: orderId, total_cents: 4200 }).execute();
 *   await enqueueEvent(fromKysely(trx), { aggregateType: 'order', aggregateId: orderId, eventType: 'order.placed', payload: { orderId } });
 * });
 */
// biome-ignore lint/suspicious/noExplicitAny: any database schema
export function fromKysely(trxOrDb: Pick<Kysely<any>, 'executeQuery'>): Queryable {
  return {
    // biome-ignore lint/suspicious/noExplicitAny: rows are typed by the caller, as in pg
    async query<R = any>(text: string, values: unknown[] = []): Promise<QueryRows<R>> {
      const { rows, numAffectedRows } = await trxOrDb.executeQuery<R>(CompiledQuery.raw(text, values));
      return { rows: [...rows], rowCount: numAffectedRows === undefined ? null : Number(numAffectedRows) };
    },
  };
}

/**
 * A Kysely that runs every statement on the consumer's transaction `tx` (the
 * client a consumer handler receives), so the handler's Kysely writes commit
 * together with the consumer's dedupe row, or not at all, under the
 * consumer's deadline and connection-loss handling. `config` is the rest of
 * a Kysely config (plugins, log); the dialect is PostgreSQL on `tx`. The
 * consumer's connection is never released by Kysely: the dialect gets a pool
 * of one wrapper around `tx` whose `release` does nothing, and `tx` itself is
 * not changed.
 *
 * Starting a transaction on it (`transaction()`) is refused: the handler is
 * inside the consumer's transaction already.
 *
 * @example
 * import { createConsumer } from 'pg-lambda-outbox/consumer';
 * import { kyselyTx } from 'pg-lambda-outbox/kysely';
 *
 * const consumer = createConsumer({
 *   name: 'receipts',
 *   pool,
 *   handlers: {
 *     'order.placed': async (event, tx) => {
 *       await kyselyTx<Database>(tx).insertInto('receipts').values({ order_id: event.aggregateId, event_id: event.id }).execute();
 *     },
 *   },
 * });
 */
export function kyselyTx<DB>(tx: ClientBase, config: Omit<KyselyConfig, 'dialect'> = {}): Kysely<DB> {
  // pg's result, typed by Kysely with the commands it reads.
  const client = { query: confine(tx, 'kyselyTx'), release() {} } as unknown as PostgresPoolClient;
  const pool = { connect: async () => client, end: async () => {} };
  return new Kysely<DB>({ ...config, dialect: new PostgresDialect({ pool }) });
}
