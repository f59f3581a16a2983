import type { Pool, PoolClient } from 'pg';
import { OutboxError } from '../errors.js';

/**
 * Runs `fn` inside one transaction on a client from `pool`: COMMIT when it
 * resolves, ROLLBACK when it throws (the error is rethrown unchanged). If a
 * statement failed inside and `fn` swallowed the error, the commit cannot
 * happen and an {@link OutboxError} says so rather than reporting success.
 *
 * @example
 * const orderId = await withTransaction(pool, async (client) => {
 *   await client.query('INSERT INTO orders ...', [...]);
 *   await enqueueEvent(client, { aggregateType: 'order', ... });
 *   return id;
 * });
 */
export async function withTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    const commit = await client.query('COMMIT');
    // If a statement failed and `fn` caught the error, PostgreSQL answers
    // COMMIT with ROLLBACK and no error: nothing was kept. Say so.
    if (commit.command !== 'COMMIT') {
      throw new OutboxError(
        'the transaction was rolled back: a statement in it failed and the error was caught',
      );
    }
    return result;
  } catch (error) {
    try {
      await client.query('ROLLBACK');
    } catch (rollbackError) {
      // The connection is unusable; destroy it rather than return it to the pool.
      broken = rollbackError as Error;
    }
    throw error;
  } finally {
    client.release(broken);
  }
}
