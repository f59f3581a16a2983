/**
 * `pg-lambda-outbox/prisma`: Prisma (7, with the `@prisma/adapter-pg` driver
 * adapter) as the outbox's database. {@link fromPrisma} makes a Prisma
 * interactive transaction a {@link Queryable}, so events are written in
 * your `prisma.$transaction(async (tx) => …)`; {@link prismaTx} gives a
 * consumer handler a PrismaClient that runs inside the consumer's
 * transaction. Prisma is never imported: its types are described here by
 * their shape, and you build the client with your own generated
 * `PrismaClient` and `PrismaPg`.
 */
import pg from 'pg';
import type { Queryable, QueryRows } from '../db/queryable.js';
import { OutboxError } from '../errors.js';
import { confine } from './confine.js';

export type { Queryable } from '../db/queryable.js';

/**
 * What {@link fromPrisma} needs: the raw query of a Prisma interactive
 * transaction (`Prisma.TransactionClient`) or of a `PrismaClient`.
 */
export interface PrismaRawQuery {
  // biome-ignore lint/suspicious/noExplicitAny: Prisma's own signature: values of any type
  $queryRawUnsafe(query: string, ...values: any[]): PromiseLike<unknown>;
}

/**
 * Makes a Prisma interactive transaction (the `tx` of
 * `prisma.$transaction(async (tx) => …)`) a {@link Queryable}: the outbox's
 * SQL, with its `$n` placeholders, goes to `tx.$queryRawUnsafe(sql,
 * ...values)` as it is. Use the transaction of the business writes so the
 * events commit or roll back with them. A `PrismaClient` itself works too,
 * each statement then its own transaction.
 *
 * Prisma returns the rows of a statement or (`$executeRawUnsafe`) its count,
 * never both, so `rowCount` is `null` ("the driver does not say"): enough
 * for writing events, which reads neither. A failed statement reaches you as
 * Prisma reports it (`PrismaClientKnownRequestError`, code `P2010`), except a
 * missing outbox table or column: an `OutboxSchemaError`.
 *
 * @example
 * import { createOutbox } from 'pg-lambda-outbox';
 * import { fromPrisma } from 'pg-lambda-outbox/prisma';
 *
 * const outbox = createOutbox({ schema: 'outbox' });
 * await prisma.$transaction(async (tx) => {
 *   const order = await tx.order.create({ data: { customer: 'ada', cents: 4200 } });
 *   await outbox.enqueue(fromPrisma(tx), { aggregateType: 'order', aggregateId: order.id, eventType: 'order.placed', payload: { orderId: order.id } });
 * });
 */
export function fromPrisma(tx: PrismaRawQuery): Queryable {
  return {
    // biome-ignore lint/suspicious/noExplicitAny: rows are typed by the caller, as in pg
    async query<R = any>(text: string, values: unknown[] = []): Promise<QueryRows<R>> {
      const rows = await tx.$queryRawUnsafe(text, ...values);
      return { rows: Array.isArray(rows) ? (rows as R[]) : [], rowCount: null };
    },
  };
}

/**
 * A PrismaClient whose every statement runs on the consumer's transaction
 * `tx` (the client a consumer handler receives), so the handler's Prisma
 * writes commit together with the consumer's dedupe row, or not at all,
 * under the consumer's deadline and connection-loss handling. `build` makes
 * the client from the `pg.Pool` it is given, as you would from your own:
 * `(pool) => new PrismaClient({ adapter: new PrismaPg(pool) })`. No
 * connection of that pool is ever opened: every query goes to `tx`.
 *
 * The transactions Prisma opens (`upsert`, `$transaction(...)`, batches)
 * become savepoints, so Prisma can never commit or roll back the consumer's
 * transaction; an isolation level for them fails (the record's transaction
 * has started). Run them one after another, not several at once. Install
 * one copy of `pg` (`npm ls pg`): `PrismaPg` recognizes a pool by
 * `instanceof pg.Pool`, and would otherwise open connections of its own.
 *
 * @example
 * import { PrismaPg } from '@prisma/adapter-pg';
 * import { createConsumer } from 'pg-lambda-outbox/consumer';
 * import { prismaTx } from 'pg-lambda-outbox/prisma';
 * import { PrismaClient } from './generated/prisma/client.js';
 *
 * const consumer = createConsumer({ outbox, name: 'receipts', pool, handlers: {
 *   'order.placed': async (event, tx) => {
 *     const prisma = prismaTx(tx, (pool) => new PrismaClient({ adapter: new PrismaPg(pool) }));
 *     await prisma.receipt.create({ data: { eventId: event.id, orderId: event.aggregateId } });
 *   },
 * } });
 */
export function prismaTx<Client>(tx: Pick<pg.ClientBase, 'query'>, build: (pool: pg.Pool) => Client): Client {
  if (typeof build !== 'function') {
    throw new OutboxError(
      'prismaTx: expected build, (pool) => new PrismaClient({ adapter: new PrismaPg(pool) })',
    );
  }
  const query = confine(tx, 'prismaTx');
  // The one connection the pool hands out: `tx`, which only the consumer releases.
  const connection = {
    query,
    on: () => connection,
    removeListener: () => connection,
    release: () => {},
  };
  // A real pg.Pool (PrismaPg checks instanceof) that never connects.
  const pool = Object.assign(new pg.Pool(), {
    query,
    connect: async () => connection,
    end: async () => {},
  });
  return build(pool as unknown as pg.Pool);
}
