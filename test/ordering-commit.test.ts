import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { enqueueEvent, enqueueEvents } from '../lib/outbox/enqueue.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();
const open: pg.PoolClient[] = [];

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, outbox_aggregate_locks');
});
afterEach(async () => {
  for (const client of open.splice(0)) {
    await client.query('ROLLBACK').catch(() => {});
    client.release();
  }
});

/** A client with an open transaction, rolled back after the test if still open. */
async function begin(): Promise<pg.PoolClient> {
  const client = await db.pool.connect();
  open.push(client);
  await client.query('BEGIN');
  return client;
}

async function commit(client: pg.PoolClient) {
  await client.query('COMMIT');
  open.splice(open.indexOf(client), 1);
  client.release();
}

const event = (aggregateId: string, name: string) => ({
  aggregateType: 'order',
  aggregateId,
  eventType: 'order.updated',
  payload: { name },
});

async function seqOf(ids: string[]): Promise<bigint[]> {
  const { rows } = await db.pool.query<{ id: string; seq: string }>(
    'SELECT id, seq FROM outbox_events WHERE id = ANY($1::uuid[])',
    [ids],
  );
  return ids.map((id) => BigInt(rows.find((r) => r.id === id)?.seq as string));
}

/** True once `pid` waits for a lock (not just slow): what "T2 blocks" means. */
async function waitsForLock(pid: number): Promise<boolean> {
  for (let i = 0; i < 50; i++) {
    const { rows } = await db.pool.query(`SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, [
      pid,
    ]);
    if (rows[0]?.wait_event_type === 'Lock') return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

const pidOf = async (client: pg.PoolClient) =>
  (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid as number;

describe('enqueueEvents serializes the writers of one aggregate', () => {
  it('T1 enqueues and stays open, T2 waits for it before its event is numbered: seq order is commit order', async () => {
    const t1 = await begin();
    const t2 = await begin();
    const t2pid = await pidOf(t2);
    const e1 = await enqueueEvent(t1, event('X', 'e1'));
    // T2 starts while T1 is open: it must wait, and must not have drawn its seq yet.
    const e2 = enqueueEvent(t2, event('X', 'e2'));
    expect(await waitsForLock(t2pid)).toBe(true);
    // T1 writes again after T2 started waiting, then commits.
    const e1b = await enqueueEvent(t1, event('X', 'e1b'));
    await commit(t1);
    const e2id = await e2;
    await commit(t2);
    const [s1, s1b, s2] = await seqOf([e1, e1b, e2id]);
    expect((s1 as bigint) < (s1b as bigint)).toBe(true);
    expect((s1b as bigint) < (s2 as bigint)).toBe(true);
  });

  it('another aggregate does not wait; a rolled-back writer releases the aggregate', async () => {
    const t1 = await begin();
    await enqueueEvent(t1, event('X', 'x1'));
    // Y is not held by T1: this completes at once (the test would time out otherwise).
    const t2 = await begin();
    await enqueueEvent(t2, event('Y', 'y1'));
    await commit(t2);
    const t3 = await begin();
    const t3pid = await pidOf(t3);
    const x2 = enqueueEvent(t3, event('X', 'x2'));
    expect(await waitsForLock(t3pid)).toBe(true);
    await t1.query('ROLLBACK');
    open.splice(open.indexOf(t1), 1);
    t1.release();
    await x2;
    await commit(t3);
    const { rows } = await db.pool.query('SELECT payload->>$1 AS name FROM outbox_events ORDER BY seq', [
      'name',
    ]);
    expect(rows.map((r) => r.name)).toEqual(['y1', 'x2']);
  });

  it('two transactions locking the same aggregates in opposite input order do not deadlock', async () => {
    const t1 = await begin();
    const t2 = await begin();
    const t2pid = await pidOf(t2);
    await enqueueEvents(t1, [event('A', 'a1'), event('B', 'b1')]);
    const second = enqueueEvents(t2, [event('B', 'b2'), event('A', 'a2')]);
    expect(await waitsForLock(t2pid)).toBe(true);
    await commit(t1);
    await second;
    await commit(t2);
    const { rows } = await db.pool.query('SELECT payload->>$1 AS name FROM outbox_events ORDER BY seq', [
      'name',
    ]);
    expect(rows.map((r) => r.name)).toEqual(['a1', 'b1', 'b2', 'a2']);
  });

  it('locking writes no new row version for an aggregate that already has its lock row', async () => {
    await enqueueEvent(db.pool, event('Z', 'z1'));
    const before = await db.pool.query(
      `SELECT ctid::text FROM outbox_aggregate_locks WHERE aggregate_id = 'Z'`,
    );
    expect(before.rows).toHaveLength(1);
    for (let i = 0; i < 5; i++) await enqueueEvent(db.pool, event('Z', `z${i + 2}`));
    const after = await db.pool.query(
      `SELECT ctid::text FROM outbox_aggregate_locks WHERE aggregate_id = 'Z'`,
    );
    expect(after.rows).toEqual(before.rows);
  });

  it('lockAggregates: false skips the lock (T2 does not wait)', async () => {
    const t1 = await begin();
    await enqueueEvent(t1, event('X', 'e1'), { lockAggregates: false });
    const t2 = await begin();
    await enqueueEvent(t2, event('X', 'e2'), { lockAggregates: false });
    await commit(t2);
    await commit(t1);
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM outbox_aggregate_locks');
    expect(rows[0].n).toBe(0);
  });

  it('an ordered relay publishes one aggregate in commit order even when T2 started while T1 was open', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('commit-order')}.fifo`);
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      [{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
      { ordering: 'aggregate' },
    );
    const committed: string[] = [];
    const t1 = await begin();
    await enqueueEvent(t1, { ...event('X', 'e1'), id: randomUUID() });
    const t2 = await begin();
    const second = (async () => {
      await enqueueEvent(t2, event('X', 'e2'));
      await commit(t2);
      committed.push('e2');
    })();
    // Give T2 every chance to commit first (it can only if nothing holds it back).
    await new Promise((r) => setTimeout(r, 300));
    await commit(t1);
    committed.push('e1');
    await second;
    expect(committed).toEqual(['e1', 'e2']);

    expect(await drainUntilIdle(relay)).toMatchObject({ published: 2 });
    const received = await drainQueue(aws.sqs, queue.url, 2);
    expect(received.map((m) => JSON.parse(m.Body as string).payload.name)).toEqual(committed);
  });
});
