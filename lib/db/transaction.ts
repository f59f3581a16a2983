import type { Pool, PoolClient } from 'pg';

/**
 * Runs `fn` inside one transaction on a client from `pool`: COMMIT when it
 * resolves, ROLLBACK when it throws (the error is rethrown unchanged).
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
    await client.query('COMMIT');
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
