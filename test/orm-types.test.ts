// Type tests of the ORM adapters, imported from the package's entry points as
// a user would: each library's own database and transaction objects are
// accepted without casts, the write side gets a Queryable, and the consumer
// side accepts the client a handler receives and returns the ORM's own type.
import type { NodePgDatabase, NodePgTransaction } from 'drizzle-orm/node-postgres';
import type { PgTransaction } from 'drizzle-orm/pg-core';
import type { Knex } from 'knex';
import type { ControlledTransaction, Kysely, Transaction } from 'kysely';
import type { enqueueEvent, Queryable } from 'pg-lambda-outbox';
import type { EventHandler } from 'pg-lambda-outbox/consumer';
import { drizzleTx, fromDrizzle } from 'pg-lambda-outbox/drizzle';
import { fromKnex, knexTx } from 'pg-lambda-outbox/knex';
import { fromKysely, kyselyTx } from 'pg-lambda-outbox/kysely';
import { fromTypeORM, typeormTx } from 'pg-lambda-outbox/typeorm';
import type { EntityManager, QueryRunner } from 'typeorm';
import { describe, expectTypeOf, it } from 'vitest';

interface Database {
  orders: { id: string; total_cents: number };
}
const schema = {};
/** What a consumer handler gets as `tx`. */
type HandlerClient = Parameters<EventHandler>[1];

describe('ORM adapter types', () => {
  it('Drizzle: databases and transactions become a Queryable; drizzleTx is a typed NodePgDatabase', () => {
    expectTypeOf<NodePgDatabase>().toExtend<Parameters<typeof fromDrizzle>[0]>();
    expectTypeOf<NodePgDatabase<typeof schema>>().toExtend<Parameters<typeof fromDrizzle>[0]>();
    // biome-ignore lint/suspicious/noExplicitAny: any schema
    expectTypeOf<NodePgTransaction<any, any>>().toExtend<Parameters<typeof fromDrizzle>[0]>();
    // biome-ignore lint/suspicious/noExplicitAny: any driver and schema
    expectTypeOf<PgTransaction<any, any, any>>().toExtend<Parameters<typeof fromDrizzle>[0]>();
    expectTypeOf(fromDrizzle).returns.toEqualTypeOf<Queryable>();
    expectTypeOf<HandlerClient>().toExtend<Parameters<typeof drizzleTx>[0]>();
    expectTypeOf(drizzleTx<typeof schema>).returns.toEqualTypeOf<NodePgDatabase<typeof schema>>();
  });

  it('Kysely: instances and transactions become a Queryable; kyselyTx is a typed Kysely', () => {
    expectTypeOf<Kysely<Database>>().toExtend<Parameters<typeof fromKysely>[0]>();
    expectTypeOf<Transaction<Database>>().toExtend<Parameters<typeof fromKysely>[0]>();
    expectTypeOf<ControlledTransaction<Database>>().toExtend<Parameters<typeof fromKysely>[0]>();
    expectTypeOf(fromKysely).returns.toEqualTypeOf<Queryable>();
    expectTypeOf<HandlerClient>().toExtend<Parameters<typeof kyselyTx>[0]>();
    expectTypeOf(kyselyTx<Database>).returns.toEqualTypeOf<Kysely<Database>>();
  });

  it('Knex: instances and transactions become a Queryable; knexTx is a Knex', () => {
    expectTypeOf<Knex>().toExtend<Parameters<typeof fromKnex>[0]>();
    expectTypeOf<Knex.Transaction>().toExtend<Parameters<typeof fromKnex>[0]>();
    expectTypeOf(fromKnex).returns.toEqualTypeOf<Queryable>();
    expectTypeOf<HandlerClient>().toExtend<Parameters<typeof knexTx>[1]>();
    expectTypeOf(knexTx).returns.toEqualTypeOf<Knex>();
  });

  it('TypeORM: entity managers and query runners become a Queryable; typeormTx is an EntityManager', () => {
    expectTypeOf<EntityManager>().toExtend<Parameters<typeof fromTypeORM>[0]>();
    expectTypeOf<QueryRunner>().toExtend<Parameters<typeof fromTypeORM>[0]>();
    expectTypeOf(fromTypeORM).returns.toEqualTypeOf<Queryable>();
    expectTypeOf<HandlerClient>().toExtend<Parameters<typeof typeormTx>[1]>();
    expectTypeOf(typeormTx).returns.toEqualTypeOf<EntityManager>();
  });

  it('a Queryable from any adapter goes to enqueueEvent as it is', () => {
    expectTypeOf(fromKnex).returns.toExtend<Parameters<typeof enqueueEvent>[0]>();
  });
});
