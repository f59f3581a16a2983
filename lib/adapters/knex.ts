/**
 * `pg-lambda-outbox/knex`: Knex (with the `pg` client) as the outbox's
 * database. {@link fromKnex} makes a Knex transaction (or a Knex instance) a
 * {@link Queryable}, so `enqueueEvents` writes in your Knex transaction;
 * {@link knexTx} gives a consumer handler a Knex that runs inside the
 * consumer's transaction. Knex is imported only as types.
 */
import type { Knex } from 'knex';
import type { ClientBase } from 'pg';
import type { Queryable, QueryRows } from '../db/queryable.js';
import { ValidationError } from '../errors.js';
import { confine } from './confine.js';
import { splitPlaceholders } from './placeholders.js';

export type { Queryable } from '../db/queryable.js';

/**
 * `$n` SQL as `knex.raw` wants it: `?` bindings, one per reference (a `$1`
 * used twice binds its value twice), and every literal `?` (the jsonb
 * operators `?`, `?|`, `?&`, or one inside a string) escaped as `\?`, which
 * Knex turns back into `?`. A `$n` inside a literal, quoted identifier or
 * comment is left alone.
 *
 * Knex deletes any backslash directly before a `?` and cannot express one, so
 * SQL with `\?` (possible only inside a literal or comment) is refused.
 */
export function toKnexRaw(
  text: string,
  values: readonly unknown[] = [],
): { sql: string; bindings: unknown[] } {
  const { fragments, params } = splitPlaceholders(text, values.length);
  let sql = '';
  fragments.forEach((fragment, i) => {
    if (fragment.includes('\\?') || (i < params.length && fragment.endsWith('\\'))) {
      throw new ValidationError('sql', 'knex.raw cannot send a backslash directly before "?" or a parameter');
    }
    sql += fragment.replaceAll('?', '\\?');
    // Two adjacent placeholders would read as Knex's `??` (an identifier).
    if (i < params.length) sql += fragment === '' && i > 0 ? ' ?' : '?';
  });
  // knex.raw refuses `undefined` bindings; pg sends `undefined` as NULL.
  const bindings = params.map((index) => values[index] ?? null);
  return { sql, bindings };
}

/**
 * Makes a Knex transaction (or a Knex instance, each statement then its own
 * transaction) a {@link Queryable}. Use the transaction of the business
 * writes so the events commit or roll back with them.
 *
 * Rows come back as `pg` returns them for `knex.raw`, after the instance's
 * `postProcessResponse`, if it has one.
 *
 * @example
 * import { enqueueEvent } from 'pg-lambda-outbox';
 * import { fromKnex } from 'pg-lambda-outbox/knex';
 *
 * await knex.transaction(async (trx) => {
 *   await trx('orders').insert({ id: orderId, total_cents: 4200 });
 *   await enqueueEvent(fromKnex(trx), { aggregateType: 'order', aggregateId: orderId, eventType: 'order.placed', payload: { orderId } });
 * });
 */
export function fromKnex(trxOrKnex: Pick<Knex, 'raw'>): Queryable {
  return {
    // biome-ignore lint/suspicious/noExplicitAny: rows are typed by the caller, as in pg
    async query<R = any>(text: string, values?: unknown[]): Promise<QueryRows<R>> {
      const { sql, bindings } = toKnexRaw(text, values);
      const result = (await trxOrKnex.raw(sql, bindings as Knex.RawBinding[])) as Partial<QueryRows<R>>;
      return { rows: result?.rows ?? [], rowCount: result?.rowCount ?? null };
    },
  };
}

/**
 * A Knex that runs every statement on the consumer's transaction `tx` (the
 * client a consumer handler receives), so the handler's Knex writes commit
 * together with the consumer's dedupe row, or not at all. It keeps `knex`'s
 * configuration (identifier wrapping, `postProcessResponse`, ...) and the
 * consumer's deadline and connection-loss handling; `knex` itself is not
 * changed and its pool is not used.
 *
 * Starting a transaction on it (`transaction()`) is refused: the handler is
 * inside the consumer's transaction already.
 *
 * @example
 * import { createConsumer } from 'pg-lambda-outbox/consumer';
 * import { knexTx } from 'pg-lambda-outbox/knex';
 *
 * const consumer = createConsumer({
 *   name: 'receipts',
 *   pool,
 *   handlers: {
 *     'order.placed': async (event, tx) => {
 *       await knexTx(knex, tx)('receipts').insert({ order_id: event.aggregateId, event_id: event.id });
 *     },
 *   },
 * });
 */
export function knexTx(knex: Knex, tx: ClientBase): Knex {
  const query = confine(tx, 'knexTx');
  // What Knex's pg dialect calls on a connection: query(config, callback).
  const connection = {
    query(config: unknown, callback: (error: unknown, result?: unknown) => void): void {
      query(config).then(
        (result) => callback(null, result),
        (error) => callback(error),
      );
    },
  };
  // withUserParams is Knex's way to a second instance sharing the first one's
  // configuration; its client is a copy, so overriding how it acquires a
  // connection leaves `knex` untouched.
  const bound = knex.withUserParams(knex.userParams ?? {});
  Object.assign(bound.client, {
    acquireConnection: async () => connection,
    releaseConnection: async () => {},
  });
  return bound;
}
