import type { Pool, PoolClient } from 'pg';
import { DatabaseUnavailableError, TransactionRolledBackError } from '../errors.js';

/**
 * Runs `fn` inside one transaction on a client from `pool`: COMMIT when it
 * resolves, ROLLBACK when it throws (the error is rethrown unchanged).
 *
 * - No connection from the pool → {@link DatabaseUnavailableError}.
 * - PostgreSQL answers COMMIT of a transaction in which a statement failed
 *   with ROLLBACK, not an error. If `fn` caught such an error and carried on,
 *   nothing was kept: that throws {@link TransactionRolledBackError} rather
 *   than reporting success.
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
export async function withTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  let client: PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    throw new DatabaseUnavailableError(`could not get a database connection: ${(error as Error).message}`, {
      cause: error,
    });
  }
  // Destroy rather than reuse the connection when its state is unknown: BEGIN
  // or COMMIT failed (most likely the connection itself), or ROLLBACK did.
  let broken: Error | undefined;
  try {
    try {
      await client.query('BEGIN');
    } catch (error) {
      broken = error as Error;
      throw error;
    }
    let result: T;
    try {
      result = await fn(client);
    } catch (error) {
      await client.query('ROLLBACK').catch((rollbackError: Error) => {
        broken = rollbackError;
      });
      throw error;
    }
    let command: string;
    try {
      ({ command } = await client.query('COMMIT'));
    } catch (error) {
      // Committed or not is unknown (the connection failed mid-COMMIT).
      broken = error as Error;
      throw error;
    }
    if (command !== 'COMMIT') {
      throw new TransactionRolledBackError(
        'the transaction was rolled back at COMMIT: a statement in it failed and the error was caught',
      );
    }
    return result;
  } finally {
    client.release(broken);
  }
}
