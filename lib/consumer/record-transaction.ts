import type { Pool, PoolClient } from 'pg';
import { DatabaseUnavailableError, TransactionRolledBackError } from './errors.js';

/**
 * Runs `fn` in one transaction on a client from `pool`: COMMIT when it
 * resolves, ROLLBACK when it throws (the error is rethrown unchanged).
 *
 * Differs from a plain BEGIN/COMMIT wrapper in two ways the consumer needs:
 * - A failed connect becomes a {@link DatabaseUnavailableError}, so the caller
 *   can stop trying the rest of the batch.
 * - PostgreSQL answers COMMIT of a transaction in which a statement failed
 *   with ROLLBACK, not an error. A handler that catches a database error and
 *   carries on would otherwise look successful while nothing was kept, and
 *   the message would be deleted from the queue. That case throws
 *   {@link TransactionRolledBackError}.
 *
 * @example
 * const status = await inRecordTransaction(pool, async (tx) => {
 *   if (!(await markProcessed(tx, name, event.id, event.type))) return 'duplicate';
 *   await handler(event, tx, context);
 *   return 'processed';
 * });
 */
export async function inRecordTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
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
      // Committed or not is unknown; a redelivery finds out through the dedupe row.
      broken = error as Error;
      throw error;
    }
    if (command !== 'COMMIT') {
      throw new TransactionRolledBackError(
        'the transaction was rolled back at COMMIT: a statement in it failed and the handler caught the error',
      );
    }
    return result;
  } finally {
    client.release(broken);
  }
}
