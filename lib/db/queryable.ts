/**
 * The one thing the outbox needs of a database connection: a `query` method
 * taking SQL with PostgreSQL's `$1, $2, ...` placeholders and an array of
 * values, resolving to the rows (and, for writes, how many rows changed).
 *
 * A `pg` Client, PoolClient or Pool has this shape as it is. An ORM's or query
 * builder's transaction object usually does not (other placeholders, other
 * result shapes): wrap it with the adapter of that library
 * (`pg-lambda-outbox/drizzle`, `/kysely`, `/knex`, `/typeorm`), or write one
 * in a few lines for any other (docs/orm.md).
 */
export interface Queryable {
  // biome-ignore lint/suspicious/noExplicitAny: rows are typed by the caller's type argument, as in pg
  query<R = any>(text: string, values?: unknown[]): Promise<QueryRows<R>>;
}

/** What a {@link Queryable}'s `query` resolves to. */
// biome-ignore lint/suspicious/noExplicitAny: as pg's QueryResult
export interface QueryRows<R = any> {
  rows: R[];
  /** Rows inserted, updated or deleted; `null`/absent when the driver does not say. */
  rowCount?: number | null;
}
