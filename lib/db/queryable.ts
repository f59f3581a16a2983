import { createHash } from 'node:crypto';
import pg from 'pg';

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

const names = new Map<string, string>();

/**
 * Runs `text` as a named prepared statement when `db` is this package's `pg`
 * (a Pool, Client or PoolClient): each connection plans it once and, after
 * five runs, reuses a generic plan. The ordered claim costs about 3 ms to
 * plan and well under 1 ms to run on an outbox with nothing to claim, so
 * planning it on every claim tripled what a claim costs. Any other
 * Queryable (an ORM's transaction, another copy of pg) runs it as given.
 * Behind RDS Proxy a prepared statement pins the session to its database
 * connection, which a relay holds for its run anyway.
 */
export function queryPrepared<R>(db: Queryable, text: string, values: unknown[]): Promise<QueryRows<R>> {
  if (!(db instanceof pg.Pool || db instanceof pg.Client)) return db.query<R>(text, values);
  let name = names.get(text);
  if (name === undefined) {
    name = `outbox_${createHash('sha1').update(text).digest('hex').slice(0, 16)}`;
    names.set(text, name);
  }
  return (db as pg.Pool).query({ name, text, values }) as unknown as Promise<QueryRows<R>>;
}

/**
 * Has a pool's connections run prepared statements with their generic plan
 * (`plan_cache_mode = force_generic_plan`), for the relay's pools. Left to
 * itself, PostgreSQL picks between planning at every run (about 2 ms for the
 * ordered claim) and one generic plan by the costs the statement met on that
 * connection, so a relay's claims cost what its first claims happened to
 * see: in one benchmark run, 3.8 times the plain claim with planning and 2.4
 * to 2.7 times with the generic plan, on the same shapes. The claim's plan
 * does not depend on its parameters (its limits are written into its text),
 * so the generic plan is the one to keep. Behind RDS Proxy the setting pins
 * the session, as the prepared statement does anyway. A server that refuses
 * the setting leaves planning as it was.
 */
export function preferGenericPlans<P extends pg.Pool>(pool: P): P {
  const SET = 'SET plan_cache_mode = force_generic_plan';
  const done = new WeakSet<object>();
  // pg-pool's onConnect hook runs before the connection is handed out, so
  // the SET is not queued beside its first query (which pg 8 warns of and
  // pg 9 refuses). An older pg-pool ignores it: the connect event sets it.
  const options = pool.options as pg.PoolConfig;
  const before = options.onConnect;
  options.onConnect = async (client: pg.ClientBase) => {
    await before?.(client);
    await client.query(SET).catch(() => {});
    done.add(client);
  };
  pool.on('connect', (client) => {
    if (!done.has(client)) client.query(SET).catch(() => {});
  });
  return pool;
}
