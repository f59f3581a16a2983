import type { Pool, PoolClient } from 'pg';
import { DatabaseUnavailableError, TransactionRolledBackError } from '../errors.js';
import { type OutboxLogger, silentLogger } from '../observer.js';
import { guardPool, translateConnectionError, watchClient } from './connection-guard.js';
import { guardClient, setStatementTimeout, TransactionTimeoutError } from './guarded-client.js';

export interface TransactionOptions {
  /** Where a connection lost mid-transaction is reported (as a warning). */
  logger?: OutboxLogger | undefined;
  /**
   * Epoch milliseconds (as `now` counts) by which every statement of the
   * transaction must have finished, e.g. the invocation's end minus a safety
   * margin. `statement_timeout` is lowered (transaction-local, `SET LOCAL`) to
   * the time left, never raised; a statement cut off rejects with
   * {@link TransactionTimeoutError} and the transaction rolls back. Work that
   * is not a statement (an HTTP call in the callback) is not bounded.
   */
  deadline?: number | undefined;
  /** Clock for `deadline`; `Date.now` by default. */
  now?: (() => number) | undefined;
  /**
   * How much `statement_timeout` may exceed the time left before it is
   * lowered again, at the cost of one round trip. Default 250 ms.
   */
  deadlineSlackMs?: number | undefined;
}

/**
 * Runs `fn` inside one transaction on a client from `pool`: COMMIT when it
 * resolves, ROLLBACK when it throws (the error is rethrown unchanged, except
 * as below).
 *
 * - No connection from the pool → {@link DatabaseUnavailableError}.
 * - The connection is lost during the transaction (terminated by the server,
 *   a failover, a network drop), even while `fn` awaits something else: no
 *   uncaught exception; the next statement rejects with `ConnectionLostError`
 *   (a {@link DatabaseUnavailableError}) and the client is destroyed.
 * - PostgreSQL answers COMMIT of a transaction in which a statement failed
 *   with ROLLBACK, not an error. If `fn` caught such an error and carried on,
 *   nothing was kept: that throws {@link TransactionRolledBackError} rather
 *   than reporting success.
 * - With `deadline`, a statement that would run past it rejects with
 *   {@link TransactionTimeoutError}.
 * - A connection whose state is unknown (BEGIN, COMMIT or ROLLBACK failed) is
 *   destroyed, not returned to the pool.
 *
 * @example
 * const orderId = await withTransaction(pool, async (client) => {
 *   await client.query('INSERT INTO orders ...', [...]);
 *   await enqueueEvent(client, { aggregateType: 'order', ... });
 *   return id;
 * });
 */
export async function withTransaction<T>(
  pool: Pool,
  fn: (client: PoolClient) => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  const now = options.now ?? Date.now;
  const logger = options.logger ?? silentLogger;
  // A pool without an `error` listener crashes the process when an idle
  // connection drops; give it one (a listener of the caller's is kept).
  guardPool(pool, logger);
  let client: PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    throw new DatabaseUnavailableError(`could not get a database connection: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const watch = watchClient(client, logger);
  // Destroy rather than reuse the connection when its state is unknown: BEGIN
  // or COMMIT failed (most likely the connection itself), or ROLLBACK did.
  let broken: Error | undefined;
  const failed = (error: unknown) => {
    broken = error as Error;
    return translateConnectionError(error, watch);
  };
  try {
    let guarded: PoolClient;
    try {
      await client.query('BEGIN');
      if (options.deadline === undefined) {
        guarded = guardClient(client, watch);
      } else {
        const left = options.deadline - now();
        if (left <= 0)
          throw new TransactionTimeoutError('not started: the time given to the transaction ran out');
        const appliedMs = await setStatementTimeout(client, left);
        guarded = guardClient(client, watch, {
          at: options.deadline,
          now,
          slackMs: options.deadlineSlackMs ?? 250,
          appliedMs,
        });
      }
    } catch (error) {
      if (error instanceof TransactionTimeoutError) {
        await client.query('ROLLBACK').catch(failed);
        throw error;
      }
      throw failed(error);
    }
    let result: T;
    try {
      result = await fn(guarded);
    } catch (error) {
      await client.query('ROLLBACK').catch(failed);
      // Statements on `guarded` are translated already; this catches a
      // connection error from elsewhere without renaming `fn`'s own errors.
      throw translateConnectionError(error);
    }
    let command: string;
    try {
      ({ command } = await client.query('COMMIT'));
    } catch (error) {
      // Committed or not is unknown (the connection failed mid-COMMIT).
      throw failed(error);
    }
    if (command !== 'COMMIT') {
      throw new TransactionRolledBackError(
        'the transaction was rolled back at COMMIT: a statement in it failed and the error was caught',
      );
    }
    return result;
  } finally {
    watch.stop();
    client.release(broken ?? watch.lost);
  }
}
