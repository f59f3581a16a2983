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
    for (let i = 0; i < (options.rounds ?? 200); i++)
      times.push(await oneClaim(client, options.ordered ?? false));
  } finally {
    client.release();
  }
  return median(times);
}

/**
 * Two claims measured in turns, one round each, so that both see the same
 * load on a shared machine: the medians of `a` (ordered) and of `b`
 * (unordered, the empty claim).
 */
export async function claimMsPaired(a: pg.Pool, b: pg.Pool, rounds = 200): Promise<[number, number]> {
  const [ta, tb]: [number[], number[]] = [[], []];
  const [ca, cb] = [await a.connect(), await b.connect()];
  try {
    for (let i = 0; i < rounds; i++) {
      ta.push(await oneClaim(ca, true));
      tb.push(await oneClaim(cb, false));
    }
  } finally {
    ca.release();
    cb.release();
  }
  return [median(ta), median(tb)];
}

const median = (times: number[]) => {
  times.sort((x, y) => x - y);
  return times[Math.floor(times.length / 2)] as number;
};

async function oneClaim(client: pg.PoolClient, ordered: boolean): Promise<number> {
  await client.query('BEGIN');
  const started = performance.now();
  await claimBatch(client, {
    limit: 100,
    leaseMs: 60_000,
    leaseId: randomUUID(),
    maxAttempts: 20,
    ordered,
    deadLetterPolicy: 'block',
  });
  const ms = performance.now() - started;
  await client.query('ROLLBACK');
  return ms;
}

/**
 * What a relay's claims do to an ordered shape before the claim that is
 * measured: claims of 100 run, committed, until the rows in their way are
 * parked (see lib/sql/claim-ordered.ts); the leases they took are then given
 * back as an outcome that retries at once would, except `keep`'s (another
 * relay's). Returns how many claims that took.
 */
export async function settleOrdered(db: pg.Pool, keep = ''): Promise<number> {
  let parked = -1;
  let claims = 0;
  for (let i = 0; i < 100; i++) {
    for (let k = 0; k < 20; k++, claims++) {
      await claimBatch(db, {
        limit: 100,
        leaseMs: 60_000,
        leaseId: randomUUID(),
        maxAttempts: 20,
        ordered: true,
        deadLetterPolicy: 'block',
      });
    }
    const { rows } = await db.query(
      'SELECT count(*)::int AS n FROM outbox_events WHERE parked_until > now() AND retry_after = parked_until',
    );
    if (rows[0].n === parked) break;
    parked = rows[0].n;
  }
  await db.query(
    `UPDATE outbox_events SET locked_until = NULL, locked_by = NULL, attempts = greatest(attempts - 1, 0)
     WHERE locked_until > now() AND locked_by IS NOT NULL AND aggregate_id <> $1`,
    [keep],
  );
  return claims;
}
