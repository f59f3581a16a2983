import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { claimBatch } from '../lib/sql/claim-batch.js';

/**
 * The claim's cost as the bench modules measure it: the median of `rounds`
 * claims of 100 rows on one connection, each rolled back so the table stays
 * as it was (every round claims the same oldest rows).
 */
export async function claimMs(db: pg.Pool, options: { ordered?: boolean; rounds?: number } = {}) {
  const times: number[] = [];
  const client = await db.connect();
  try {
    for (let i = 0; i < (options.rounds ?? 200); i++) {
      await client.query('BEGIN');
      const started = performance.now();
      await claimBatch(client, {
        limit: 100,
        leaseMs: 60_000,
        leaseId: randomUUID(),
        maxAttempts: 20,
        ordered: options.ordered ?? false,
        deadLetterPolicy: 'block',
      });
      times.push(performance.now() - started);
      await client.query('ROLLBACK');
    }
  } finally {
    client.release();
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)] as number;
}
