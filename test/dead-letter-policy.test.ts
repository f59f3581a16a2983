import { beforeEach, describe, expect, it } from 'vitest';
import { redriveDeadLetters } from '../lib/operations/redrive.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import { outboxStats } from '../lib/sql/outbox-stats.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

/** a: [a0 (no route: dead letter), a1, a2]; b: [b0, b1] */
async function scenario() {
  return insertEvents(db.pool, 5, (i) => ({
    aggregateId: i < 3 ? 'a' : 'b',
    eventType: i === 0 ? 'invoice.sent' : 'order.updated',
    payload: { n: i < 3 ? `a${i}` : `b${i - 3}` },
  }));
}

async function received(queueUrl: string, count: number) {
  const messages = await drainQueue(aws.sqs, queueUrl, count);
  const byGroup: Record<string, string[]> = {};
  for (const m of messages) {
    const group = m.Attributes?.MessageGroupId as string;
    byGroup[group] = [...(byGroup[group] ?? []), JSON.parse(m.Body as string).payload.n];
  }
  return byGroup;
}

const pendingNames = async () =>
  (
    await db.pool.query(
      `SELECT payload->>'n' AS n FROM outbox_events
       WHERE processed_at IS NULL AND dead_lettered_at IS NULL ORDER BY seq`,
    )
  ).rows.map((r) => r.n);

describe('ordered mode: what a dead letter does to its aggregate', () => {
  it('block (default): the aggregate waits; BlockedAggregates says so; a redrive then publishes it first, in order', async () => {
    const fifo = await createQueue(aws.sqs, `${uniqueName('dl-block')}.fifo`);
    const orders: RouteConfig = { match: 'order.*', targets: [{ type: 'sqs', queueUrl: fifo.url }] };
    const { relay, metrics } = emulatorRelay(db.pool, aws, [orders], { ordering: 'aggregate' });
    const [a0 = ''] = await scenario();

    expect(await drainUntilIdle(relay)).toMatchObject({ deadLettered: 1, published: 2 });
    expect(await pendingNames()).toEqual(['a1', 'a2']);
    expect(metrics.records).toContainEqual(
      expect.objectContaining({ name: 'BlockedAggregates', unit: 'Count', value: 1 }),
    );
    expect(await outboxStats(db.pool)).toMatchObject({ deadLetters: 1, blockedAggregates: 1, pending: 2 });
    // Draining again changes nothing: the aggregate stays held.
    expect(await drainUntilIdle(relay)).toMatchObject({ claimed: 0 });

    // The operator adds the missing route and redrives: a0 goes out before a1 and a2.
    const fixed = emulatorRelay(
      db.pool,
      aws,
      [orders, { match: 'invoice.*', targets: [{ type: 'sqs', queueUrl: fifo.url }] }],
      { ordering: 'aggregate' },
    );
    expect(await redriveDeadLetters(db.pool, { ids: [a0] })).toMatchObject({ reset: 1 });
    expect(await drainUntilIdle(fixed.relay)).toMatchObject({ published: 3, deadLettered: 0 });
    expect(await received(fifo.url, 5)).toEqual({ 'order:a': ['a0', 'a1', 'a2'], 'order:b': ['b0', 'b1'] });
    expect(await outboxStats(db.pool)).toMatchObject({ blockedAggregates: 0, pending: 0 });
  });

  it('block: discard (dry run, then real) finishes the dead letter unpublished and releases the aggregate', async () => {
    const fifo = await createQueue(aws.sqs, `${uniqueName('dl-discard')}.fifo`);
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      [{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: fifo.url }] }],
      { ordering: 'aggregate', deadLetterPolicy: 'block' },
    );
    const [a0 = ''] = await scenario();
    await drainUntilIdle(relay);
    expect(await pendingNames()).toEqual(['a1', 'a2']);

    const preview = await redriveDeadLetters(db.pool, {
      action: 'discard',
      aggregateId: 'a',
      dryRun: true,
      requestedBy: 'alice',
    });
    expect(preview).toEqual({
      action: 'discard',
      dryRun: true,
      matched: 1,
      reset: 0,
      discarded: 0,
      busy: 0,
      ids: [a0],
    });
    expect(await drainUntilIdle(relay)).toMatchObject({ claimed: 0 });

    const done = await redriveDeadLetters(db.pool, { action: 'discard', ids: [a0], requestedBy: 'alice' });
    expect(done).toEqual({
      action: 'discard',
      dryRun: false,
      matched: 1,
      reset: 0,
      discarded: 1,
      busy: 0,
      ids: [a0],
    });
    const { rows } = await db.pool.query(
      `SELECT processed_at IS NOT NULL AS finished, dead_lettered_at, discarded_by, last_error
       FROM outbox_events WHERE id = $1`,
      [a0],
    );
    expect(rows[0]).toMatchObject({ finished: true, dead_lettered_at: null, discarded_by: 'alice' });
    expect(rows[0].last_error).toMatch(/route/);
    // Discarding twice finds nothing: it is no dead letter any more.
    expect(await redriveDeadLetters(db.pool, { action: 'discard', ids: [a0] })).toMatchObject({ matched: 0 });

    expect(await drainUntilIdle(relay)).toMatchObject({ published: 2 });
    expect(await received(fifo.url, 4)).toEqual({ 'order:a': ['a1', 'a2'], 'order:b': ['b0', 'b1'] });
  });

  it('skip: the aggregate moves on past its dead letter', async () => {
    const fifo = await createQueue(aws.sqs, `${uniqueName('dl-skip')}.fifo`);
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      [{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: fifo.url }] }],
      { ordering: 'aggregate', deadLetterPolicy: 'skip' },
    );
    await scenario();
    await drainUntilIdle(relay);
    expect(await pendingNames()).toEqual([]);
    expect(await received(fifo.url, 4)).toEqual({ 'order:a': ['a1', 'a2'], 'order:b': ['b0', 'b1'] });
  });
});
