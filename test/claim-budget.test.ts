// The claim's byte budget, at the statement: rows are taken in claim order
// while the payload bytes before them are under the budget; the first row
// always; in ordered mode the cut leaves whole runs and a prefix of one.
import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { enqueueEvents } from '../lib/outbox/enqueue.js';
import { resolveRelayOptions } from '../lib/relay/options.js';
import { type ClaimParams, claimBatch } from '../lib/sql/claim-batch.js';
import { completeBatch } from '../lib/sql/complete-batch.js';
import { useTestDatabase } from './support/database.js';

const db = useTestDatabase();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

const params = (overrides: Partial<ClaimParams> = {}): ClaimParams => ({
  limit: 100,
  leaseMs: 60_000,
  leaseId: randomUUID(),
  maxAttempts: 10,
  ordered: false,
  ...overrides,
});

/** Events whose payload JSON text is `bytes` long, aggregates as given, in order. */
async function write(aggregates: string[], bytes: number): Promise<string[]> {
  const pad = 'x'.repeat(bytes - '{"p":""}'.length);
  return enqueueEvents(
    db.pool,
    aggregates.map((a) => ({
      aggregateType: 'order',
      aggregateId: a,
      eventType: 'order.updated',
      payload: { p: pad },
    })),
  );
}

const ids = (claim: { events: Array<{ id: string }> }) => claim.events.map((e) => e.id);

describe('the claim byte budget', () => {
  it('records each payload size at enqueue', async () => {
    await write(['a'], 1_000);
    const { rows } = await db.pool.query('SELECT payload_bytes FROM outbox_events');
    expect(rows).toEqual([{ payload_bytes: 1_000 }]);
  });

  it('unordered: stops where the bytes before a row reach the budget; a row larger than the budget goes alone', async () => {
    const small = await write(['a', 'b', 'c', 'd', 'e', 'f'], 1_000);
    expect(ids(await claimBatch(db.pool, params({ maxBytes: 3_500 })))).toEqual(small.slice(0, 4));
    expect(ids(await claimBatch(db.pool, params({ maxBytes: 3_500 })))).toEqual(small.slice(4));

    await db.pool.query('TRUNCATE outbox_events');
    const big = await write(['g', 'h'], 50_000);
    expect(ids(await claimBatch(db.pool, params({ maxBytes: 10_000 })))).toEqual([big[0]]);
    expect(ids(await claimBatch(db.pool, params({ maxBytes: 10_000 })))).toEqual([big[1]]);
    // Without a budget, as before: the whole batch.
    await db.pool.query('UPDATE outbox_events SET locked_until = NULL, locked_by = NULL');
    expect(ids(await claimBatch(db.pool, params()))).toEqual(big);
  });

  it('ordered: whole runs, then a prefix of the next; the rest of that aggregate waits for it', async () => {
    const events = await write(['a', 'a', 'a', 'b', 'b', 'b'], 1_000);
    const ordered = { ordered: true, perAggregate: 3, maxBytes: 3_500 };
    expect(ids(await claimBatch(db.pool, params(ordered)))).toEqual(events.slice(0, 4));
    // b's head is leased: nothing of b until it is done.
    expect(ids(await claimBatch(db.pool, params(ordered)))).toEqual([]);
    await db.pool.query(
      `UPDATE outbox_events SET processed_at = now(), locked_until = NULL, locked_by = NULL WHERE id = ANY($1::uuid[])`,
      [events.slice(0, 4)],
    );
    expect(ids(await claimBatch(db.pool, params(ordered)))).toEqual(events.slice(4));
  });

  it('a row written without payload_bytes counts the length of its text, not its compressed size', async () => {
    // 3,000 repeated characters: TOAST stores each in a few dozen bytes.
    await db.pool.query(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
       SELECT gen_random_uuid(), 'order', 'o-' || g, 'order.updated', jsonb_build_object('p', repeat('x', 3000))
       FROM generate_series(1, 4) g`,
    );
    const { rows } = await db.pool.query(
      'SELECT max(pg_column_size(payload))::int AS stored FROM outbox_events',
    );
    expect(rows[0].stored).toBeLessThan(500);
    const claim = await claimBatch(db.pool, params({ maxBytes: 5_000 }));
    expect(claim.events).toHaveLength(2);
  });

  it('a budget of 0 still takes one row; the relay refuses a budget that is not a positive whole number', async () => {
    const [first] = await write(['a', 'b'], 100);
    expect(ids(await claimBatch(db.pool, params({ maxBytes: 0 })))).toEqual([first]);
    expect(ids(await claimBatch(db.pool, params({ ordered: true, maxBytes: 0 })))).toHaveLength(1);
    for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => resolveRelayOptions({ maxClaimBytes: bad })).toThrow(/maxClaimBytes/);
    }
  });
});

describe('rows held back behind a blocked head', () => {
  it('are written claimable (no retry_after), so a due retry behind them is not starved by new aggregates', async () => {
    // 30 aggregates whose head is dead and whose second event was held back
    // behind it, as the relay records it (a retry without a wait).
    const blocked = await write(
      Array.from({ length: 60 }, (_, i) => `blocked-${i % 30}`),
      100,
    );
    const leaseId = randomUUID();
    await db.pool.query(
      `UPDATE outbox_events SET locked_by = $1, locked_until = now() + interval '1 minute'`,
      [leaseId],
    );
    await completeBatch(
      db.pool,
      leaseId,
      blocked.map((id, i) =>
        i < 30
          ? { id, status: 'dead' as const, error: 'poison', delivered: [] }
          : { id, status: 'retry' as const, error: 'held back', delayMs: 0, delivered: [], refund: true },
      ),
    );
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM outbox_events WHERE dead_lettered_at IS NULL AND retry_after IS NULL`,
    );
    expect(rows[0].n).toBe(30);
    // A head whose retry came due a minute ago, then new aggregates at every claim.
    const [due] = await write(['due-one'], 100);
    await db.pool.query(
      `UPDATE outbox_events SET retry_after = now() - interval '1 minute', attempts = 1 WHERE id = $1`,
      [due],
    );
    const claimedIds: string[] = [];
    for (let round = 0; round < 5; round++) {
      await write(
        Array.from({ length: 12 }, (_, i) => `new-${round}-${i}`),
        100,
      );
      claimedIds.push(...ids(await claimBatch(db.pool, params({ ordered: true, limit: 10 }))));
    }
    expect(claimedIds).toContain(due);
  });
});
