import type pg from 'pg';

/**
 * The reference article's relay, followed literally so the benchmark has a
 * fair "before": one transaction per batch that SELECTs ... FOR UPDATE SKIP
 * LOCKED, stays open while each event is published one at a time, and issues
 * one UPDATE per row. (It is given our partial index: ordering by seq instead
 * of an unindexed created_at, so the comparison is not about a missing index.)
 */
export async function baselineBatch(
  pool: pg.Pool,
  publishOne: (row: {
    id: string;
    event_type: string;
    aggregate_id: string;
    payload: unknown;
  }) => Promise<void>,
  batchSize: number,
  maxAttempts = 20,
): Promise<number> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query(
      `SELECT id, aggregate_type, aggregate_id, event_type, payload
       FROM outbox_events
       WHERE processed_at IS NULL AND dead_lettered_at IS NULL AND attempts < $1
       ORDER BY seq
       LIMIT $2
       FOR UPDATE SKIP LOCKED`,
      [maxAttempts, batchSize],
    );
    for (const row of rows) {
      try {
        await publishOne(row);
      } catch {
        await client.query('UPDATE outbox_events SET attempts = attempts + 1 WHERE id = $1', [row.id]);
        continue;
      }
      await client.query('UPDATE outbox_events SET processed_at = now() WHERE id = $1', [row.id]);
    }
    await client.query('COMMIT');
    return rows.length;
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
}
