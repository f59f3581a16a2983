/**
 * `pg-lambda-outbox/drizzle`: Drizzle ORM as the outbox's database.
 * {@link fromDrizzle} makes a Drizzle transaction (or database) a
 * {@link Queryable}, so `enqueueEvents` writes in your Drizzle transaction;
 * {@link drizzleTx} gives a consumer handler a node-postgres Drizzle database
 * that runs inside the consumer's transaction.
 */
import { type SQL, type SQLWrapper, sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import type { DrizzleConfig } from 'drizzle-orm/utils';
import type { ClientBase, PoolClient } from 'pg';
import type { Queryable, QueryRows } from '../db/queryable.js';
import { confine } from './confine.js';
import { splitPlaceholders } from './placeholders.js';

export type { Queryable } from '../db/queryable.js';

/** What {@link fromDrizzle} needs: any Drizzle PostgreSQL database or transaction has it. */
export interface DrizzleExecutor {
  execute(query: SQLWrapper): PromiseLike<unknown>;
}

/**
 * `$n` SQL as a Drizzle `SQL` object: the text between placeholders raw, each
 * `$n` a parameter (a `$1` used twice is bound twice). A `$n` inside a
 * literal, quoted identifier or comment is left alone.
 */
export function toDrizzleSql(text: string, values: readonly unknown[] = []): SQL {
  const { fragments, params } = splitPlaceholders(text, values.length);
  const chunks: SQL[] = [];
  fragments.forEach((fragment, i) => {
    chunks.push(sql.raw(fragment));
    const index = params[i];
    // sql.param keeps an array one parameter (a bare array would become a list).
    if (index !== undefined) chunks.push(sql`${sql.param(values[index])}`);
  });
  return sql.join(chunks);
}

/**
 * Makes a Drizzle transaction (or a database, each statement then its own
 * transaction) a {@link Queryable}. Use the transaction of the business
 * writes so the events commit or roll back with them.
 *
 * node-postgres (`drizzle-orm/node-postgres`) is the driver this is tested
 * with; drivers whose `execute` resolves to an array of rows (postgres.js)
 * work too, with `rowCount` from the array's `count`.
 *
 * @example
 * import { enqueueEvent } from 'pg-lambda-outbox';
 * import { fromDrizzle } from 'pg-lambda-outbox/drizzle';
 *
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values({ id: orderId, totalCents: 4200 });
 *   await enqueueEvent(fromDrizzle(tx), { aggregateType: 'order', aggregateId: orderId, eventType: 'order.placed', payload: { orderId } });
 * });
 */
export function fromDrizzle(txOrDb: DrizzleExecutor): Queryable {
  return {
    // biome-ignore lint/suspicious/noExplicitAny: rows are typed by the caller, as in pg
    async query<R = any>(text: string, values?: unknown[]): Promise<QueryRows<R>> {
      const result = await txOrDb.execute(toDrizzleSql(text, values));
      if (Array.isArray(result)) {
        const count = (result as { count?: unknown }).count;
        return { rows: result as R[], rowCount: typeof count === 'number' ? count : null };
      }
      const { rows, rowCount } = (result ?? {}) as Partial<QueryRows<R>>;
      return { rows: rows ?? [], rowCount: rowCount ?? null };
    },
  };
}

/**
 * A node-postgres Drizzle database that runs every statement on the
 * consumer's transaction `tx` (the client a consumer handler receives), so
 * the handler's Drizzle writes commit together with the consumer's dedupe
 * row, or not at all, under the consumer's deadline and connection-loss
 * handling. Pass your `schema` (and `casing`, `logger`) as you would to
 * `drizzle()`.
 *
 * Starting a transaction on it (`transaction()`) is refused: the handler is
 * inside the consumer's transaction already.
 *
 * @example
 * import { createConsumer } from 'pg-lambda-outbox/consumer';
 * import { drizzleTx } from 'pg-lambda-outbox/drizzle';
 *
 * const consumer = createConsumer({
 *   name: 'receipts',
 *   pool,
 *   handlers: {
 *     'order.placed': async (event, tx) => {
 *       await drizzleTx(tx, { schema }).insert(receipts).values({ orderId: event.aggregateId, eventId: event.id });
 *     },
 *   },
 * });
 */
export function drizzleTx<TSchema extends Record<string, unknown> = Record<string, never>>(
  tx: ClientBase,
  config: DrizzleConfig<TSchema> = {},
): NodePgDatabase<TSchema> {
  // A client of its own: Drizzle only calls query() on it (and never
  // release(), which stays the consumer's).
  const client = { query: confine(tx, 'drizzleTx') } as unknown as PoolClient;
  return drizzle({ ...config, client });
}
