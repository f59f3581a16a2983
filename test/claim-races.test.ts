// Operations racing the ordered claim. A claim is one statement: it reads
// with the snapshot taken when it starts and locks its rows at the end. The
// window between the two is one claim's run time (long when the claim is
// slow); here it is made wide and certain by a pause inserted into the claim
// statement between its reads and its row locks (the statement is otherwise
// the product's own), and a replay or redrive commits inside it.
import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import type { Queryable } from '../lib/db/queryable.js';
import { redriveDeadLetters } from '../lib/operations/redrive.js';
import { replayEvents } from '../lib/operations/replay.js';
import { type ClaimParams, claimBatch } from '../lib/sql/claim-batch.js';
import { busyAggregates } from '../lib/sql/replay-events.js';
import { useTestDatabase } from './support/database.js';

const db = useTestDatabase();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, outbox_aggregate_locks, outbox_replays');
});

const params = (overrides: Partial<ClaimParams> = {}): ClaimParams => ({
  limit: 10,
  leaseMs: 60_000,
  leaseId: randomUUID(),
  maxAttempts: 10,
  ordered: true,
  ...overrides,
});

/** The row locks of the ordered claim start here; the pause goes right before them. */
const LOCKS_START = 'WHERE e.ctid = ANY (ARRAY(SELECT cand.ctid FROM cand))';

/** The pool, with `pauseMs` of sleep put into the ordered claim after its reads, before its row locks. */
function pausedBeforeLocks(pauseMs: number): Queryable {
  return {
    query: ((text: string, values?: unknown[]) => {
      if (!text.includes(LOCKS_START)) throw new Error('the ordered claim no longer has the expected shape');
      const paused = text.replace(
        LOCKS_START,
        `${LOCKS_START}\n    AND (SELECT count(*) FROM pg_sleep(${pauseMs / 1000})) = 1`,
      );
      return db.pool.query(paused, values);
    }) as Queryable['query'],
  };
}

type State = 'published' | 'pending' | 'dead';

/** One row of aggregate order:`aggregate`, seq in call order; returns its id. */
async function row(aggregate: string, state: State): Promise<string> {
  const { rows } = await db.pool.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, attempts,
                                processed_at, dead_lettered_at)
     VALUES (gen_random_uuid(), 'order', $1, 'order.updated', '{}', $2,
             CASE WHEN $3 = 'published' THEN now() END, CASE WHEN $3 = 'dead' THEN now() END)
     RETURNING id`,
    [aggregate, state === 'pending' ? 0 : 1, state],
  );
  return rows[0].id;
}

/** Ids of the aggregate's rows under a live lease, in seq order. */
async function leased(aggregate: string): Promise<string[]> {
  const { rows } = await db.pool.query(
    `SELECT id FROM outbox_events
     WHERE aggregate_id = $1 AND processed_at IS NULL AND locked_until > now() ORDER BY seq`,
    [aggregate],
  );
  return rows.map((r) => r.id);
}

/** As the relay records a publish: finished, lease cleared. */
async function publish(ids: string[]): Promise<void> {
  await db.pool.query(
    `UPDATE outbox_events SET processed_at = now(), locked_until = NULL, locked_by = NULL WHERE id = ANY($1::uuid[])`,
    [ids],
  );
}

const later = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the ordered claim against replay and redrive', () => {
  it('a replay committed while a claim is under way: the claim does not take the old head, the next one takes the replayed event first', async () => {
    const x1 = await row('a', 'published');
    const x2 = await row('a', 'pending');

    // The claim reads: X2 is the head of a. Then it pauses before locking.
    const stale = claimBatch(pausedBeforeLocks(800), params());
    await later(200);
    // Meanwhile an operator replays X1: a's head is X1 again.
    const replay = await replayEvents(db.pool, { ids: [x1], requestedBy: 'alice' });
    expect(replay).toMatchObject({ replayed: 1, busy: 0 });

    // The claim locks after the replay committed; X2 is no longer a's head.
    expect((await stale).events.map((e) => e.id)).toEqual([]);
    expect(await leased('a')).toEqual([]);
    const next = await claimBatch(db.pool, params());
    expect(next.events.map((e) => e.id)).toEqual([x1]);
    expect(await leased('a')).toEqual([x1]);
    await publish([x1]);
    expect((await claimBatch(db.pool, params())).events.map((e) => e.id)).toEqual([x2]);
  });

  it('a redrive (skip policy) committed while a claim is under way: the same, the redriven dead letter first', async () => {
    const d1 = await row('b', 'dead');
    const x2 = await row('b', 'pending');
    const skip = { deadLetterPolicy: 'skip' as const };

    const stale = claimBatch(pausedBeforeLocks(800), params(skip));
    await later(200);
    expect(await redriveDeadLetters(db.pool, { ids: [d1], requestedBy: 'alice' })).toMatchObject({
      reset: 1,
      busy: 0,
    });

    expect((await stale).events.map((e) => e.id)).toEqual([]);
    expect((await claimBatch(db.pool, params(skip))).events.map((e) => e.id)).toEqual([d1]);
    expect(await leased('b')).toEqual([d1]);
    await publish([d1]);
    expect((await claimBatch(db.pool, params(skip))).events.map((e) => e.id)).toEqual([x2]);
  });

  it('a redrive of a dead letter whose aggregate a relay is publishing waits for the next call: never two relays on one aggregate', async () => {
    const d1 = await row('c', 'dead');
    const x2 = await row('c', 'pending');
    const skip = { deadLetterPolicy: 'skip' as const };
    // With skip, X2 passes its dead letter and is being published.
    expect((await claimBatch(db.pool, params(skip))).events.map((e) => e.id)).toEqual([x2]);

    const busy = await redriveDeadLetters(db.pool, { ids: [d1], requestedBy: 'alice' });
    expect(busy).toMatchObject({ matched: 1, reset: 0, busy: 1, ids: [] });
    // A dry run says the same, without locks.
    expect(await redriveDeadLetters(db.pool, { ids: [d1], dryRun: true })).toMatchObject({
      busy: 1,
      ids: [],
    });
    expect((await claimBatch(db.pool, params(skip))).events).toEqual([]);
    expect(await leased('c')).toEqual([x2]);

    await publish([x2]);
    expect(await redriveDeadLetters(db.pool, { ids: [d1], requestedBy: 'alice' })).toMatchObject({
      reset: 1,
      busy: 0,
    });
    expect((await claimBatch(db.pool, params(skip))).events.map((e) => e.id)).toEqual([d1]);
  });

  it('a head published between the replay finding it and locking it makes the aggregate busy, not free', async () => {
    const d1 = await row('f', 'dead');
    const x2 = await row('f', 'pending');
    await row('f', 'pending');
    // x2 is leased to a relay (skip policy lets it pass its dead letter)...
    await db.pool.query(
      `UPDATE outbox_events SET locked_until = now() + interval '1 minute', locked_by = gen_random_uuid() WHERE id = $1`,
      [x2],
    );
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      // ... and records it as published right after the redrive found it as the head.
      const between: Queryable = {
        query: (async (text: string, values?: unknown[]) => {
          if (text.includes('WITH mine AS')) await publish([x2]);
          return client.query(text, values);
        }) as Queryable['query'],
      };
      const busy = await busyAggregates(between, [{ id: d1, aggregateType: 'order', aggregateId: 'f' }], {
        lock: true,
      });
      expect([...busy]).toEqual(['order\u0000f']);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it('a claim that only overlaps a replay of another aggregate is not held back', async () => {
    const y1 = await row('d', 'published');
    const z1 = await row('e', 'pending');
    const stale = claimBatch(pausedBeforeLocks(600), params());
    await later(150);
    expect(await replayEvents(db.pool, { ids: [y1], requestedBy: 'alice' })).toMatchObject({ replayed: 1 });
    expect((await stale).events.map((e) => e.id)).toEqual([z1]);
    expect((await claimBatch(db.pool, params())).events.map((e) => e.id)).toEqual([y1]);
  });
});
