import { randomUUID } from 'node:crypto';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadRelayConfig } from '../lib/config/relay-config.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import { resolveRelayOptions } from '../lib/relay/options.js';
import { claimBatch } from '../lib/sql/claim-batch.js';
import { completeBatch } from '../lib/sql/complete-batch.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { eventRows, insertEvents } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

// publishedRows: 'delete' (OUTBOX_PUBLISHED_ROWS=delete): a published row is
// deleted by the outcome statement instead of being marked published.

const db = useTestDatabase();
const aws = awsClients();
let queue: { url: string; arn: string };

beforeAll(async () => {
  queue = await createQueue(aws.sqs, uniqueName('published-rows'));
});
beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

const deleting = (routes: RouteConfig[]) => emulatorRelay(db.pool, aws, routes, { publishedRows: 'delete' });

describe("publishedRows: 'delete'", () => {
  it('120 events, batches of 50: each message arrives, and no outbox row is left', async () => {
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
      {
        publishedRows: 'delete',
        batchSize: 50,
      },
    );
    const ids = await insertEvents(db.pool, 120);
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 120, retried: 0, deadLettered: 0 });
    expect(await eventRows(db.pool)).toEqual([]);
    const received = await drainQueue(aws.sqs, queue.url, 120);
    expect(received.map((m) => JSON.parse(m.Body as string).id).sort()).toEqual([...ids].sort());
  });

  it('a batch of mixed outcomes: published rows go, a row waiting for a missing queue stays pending with its backoff', async () => {
    const missing = `${aws.endpoint}/000000000000/${uniqueName('does-not-exist')}`;
    const { relay } = deleting([
      { match: 'order.*', targets: [{ type: 'sqs', queueUrl: queue.url }] },
      { match: 'invoice.*', targets: [{ type: 'sqs', queueUrl: missing }] },
    ]);
    const good = await insertEvents(db.pool, 5);
    const [waiting] = await insertEvents(db.pool, 1, () => ({
      aggregateType: 'invoice',
      eventType: 'invoice.sent',
    }));
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 5, retried: 1, deadLettered: 0 });
    const rows = await eventRows(db.pool);
    expect(rows.map((r) => r.id)).toEqual([waiting]);
    expect(rows[0]).toMatchObject({
      processed_at: null,
      dead_lettered_at: null,
      locked_by: null,
      attempts: 0,
    });
    expect(rows[0]?.retry_after).not.toBeNull();
    expect(rows[0]?.last_error).toMatch(/NonExistentQueue|QueueDoesNotExist/);
    const received = await drainQueue(aws.sqs, queue.url, 5);
    expect(received.map((m) => JSON.parse(m.Body as string).id).sort()).toEqual([...good].sort());
  });

  it('ordered mode: 3 aggregates × 6 events reach a FIFO queue in order per group, and no row is left', async () => {
    const fifo = await createQueue(aws.sqs, `${uniqueName('published-rows')}.fifo`);
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      [{ match: '*', targets: [{ type: 'sqs', queueUrl: fifo.url }] }],
      {
        publishedRows: 'delete',
        ordering: 'aggregate',
        maxPerAggregate: 4,
      },
    );
    const ids = await insertEvents(db.pool, 18, (i) => ({ aggregateId: `a-${i % 3}`, payload: { i } }));
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 18, deadLettered: 0 });
    expect(await eventRows(db.pool)).toEqual([]);
    const received = await drainQueue(aws.sqs, fifo.url, 18);
    for (const group of ['a-0', 'a-1', 'a-2']) {
      const sent = ids.filter((_, i) => `a-${i % 3}` === group);
      const got = received
        .map((m) => JSON.parse(m.Body as string))
        .filter((e) => e.aggregateId === group)
        .map((e) => e.id);
      expect(got).toEqual(sent);
    }
  });

  it('ordered mode: events behind an undelivered head keep their rows (recorded after it); the other aggregate is published and deleted', async () => {
    const fifo = await createQueue(aws.sqs, `${uniqueName('published-rows')}.fifo`);
    const missing = `${aws.endpoint}/000000000000/${uniqueName('does-not-exist')}.fifo`;
    const { relay } = emulatorRelay(
      db.pool,
      aws,
      [
        { match: 'invoice.*', targets: [{ type: 'sqs', queueUrl: missing }] },
        { match: '*', targets: [{ type: 'sqs', queueUrl: fifo.url }] },
      ],
      // One worker: two claiming at once may split a-0's run (the second
      // locks a later row first; the first then keeps only the prefix up to
      // it, the second none of it), and the row left out waits behind the
      // head, which is right but not what this test looks at.
      { publishedRows: 'delete', ordering: 'aggregate', workers: 1 },
    );
    // Aggregate a-0: a head whose queue is missing, then two events for the
    // queue that works. They reach it (the head never goes there, so its
    // order holds), but are recorded only after the head: rows stay.
    const [head, ...behind] = [
      ...(await insertEvents(db.pool, 1, () => ({ aggregateId: 'a-0', eventType: 'invoice.sent' }))),
      ...(await insertEvents(db.pool, 2, () => ({ aggregateId: 'a-0' }))),
    ] as [string, string, string];
    const free = await insertEvents(db.pool, 3, () => ({ aggregateId: 'a-1' }));
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 3, deadLettered: 0 });
    const rows = await eventRows(db.pool);
    expect(rows.map((r) => r.id)).toEqual([head, ...behind]);
    expect(rows.every((r) => r.processed_at === null && r.dead_lettered_at === null)).toBe(true);
    expect(rows.map((r) => r.delivered_targets.length)).toEqual([0, 1, 1]);
    const received = (await drainQueue(aws.sqs, fifo.url, 5)).map((m) => JSON.parse(m.Body as string));
    expect(received.filter((e) => e.aggregateId === 'a-1').map((e) => e.id)).toEqual(free);
    expect(received.filter((e) => e.aggregateId === 'a-0').map((e) => e.id)).toEqual(behind);
  });
});

describe('completeBatch with published rows deleted', () => {
  async function claim(leaseId: string) {
    const { events } = await claimBatch(db.pool, {
      limit: 10,
      leaseMs: 60_000,
      leaseId,
      maxAttempts: 5,
      ordered: false,
      deadLetterPolicy: 'block',
    });
    return events.map((e) => e.id);
  }

  it('deletes the published, updates the retried and the dead, and touches no row leased to someone else', async () => {
    await insertEvents(db.pool, 4);
    const lease = randomUUID();
    const [published, retried, dead, stolen] = (await claim(lease)) as [string, string, string, string];
    // Our lease on `stolen` expired and another relay claimed it.
    const other = randomUUID();
    await db.pool.query('UPDATE outbox_events SET locked_by = $2 WHERE id = $1', [stolen, other]);

    const recorded = await completeBatch(
      db.pool,
      lease,
      [
        { id: published, status: 'published', delivered: [] },
        { id: retried, status: 'retry', error: 'throttled', delayMs: 5_000, delivered: [], refund: true },
        { id: dead, status: 'dead', error: 'too large', delivered: [] },
        { id: stolen, status: 'published', delivered: [] },
      ],
      'delete',
    );
    expect([...recorded].sort()).toEqual([published, retried, dead].sort());
    const rows = new Map((await eventRows(db.pool)).map((r) => [r.id, r]));
    expect(rows.has(published)).toBe(false);
    expect(rows.get(retried)).toMatchObject({ last_error: 'throttled', attempts: 0, locked_by: null });
    expect(rows.get(retried)?.retry_after).not.toBeNull();
    expect(rows.get(dead)).toMatchObject({ last_error: 'too large', locked_by: null });
    expect(rows.get(dead)?.dead_lettered_at).not.toBeNull();
    expect(rows.get(stolen)).toMatchObject({ locked_by: other, processed_at: null });

    // The all-published fast path checks the lease the same way.
    const none = await completeBatch(
      db.pool,
      lease,
      [{ id: stolen, status: 'published', delivered: [] }],
      'delete',
    );
    expect(none.size).toBe(0);
    const mine = await completeBatch(
      db.pool,
      other,
      [{ id: stolen, status: 'published', delivered: [] }],
      'delete',
    );
    expect([...mine]).toEqual([stolen]);
    expect((await eventRows(db.pool)).map((r) => r.id).sort()).toEqual([retried, dead].sort());
  });
});

describe('OUTBOX_PUBLISHED_ROWS', () => {
  const routes = JSON.stringify([
    { match: '*', targets: [{ type: 'sqs', queueUrl: 'https://sqs.example/q' }] },
  ]);

  it('keep (unset) or delete; anything else is refused by name', () => {
    expect(loadRelayConfig({ OUTBOX_ROUTES: routes }).relay.publishedRows).toBeUndefined();
    expect(
      loadRelayConfig({ OUTBOX_ROUTES: routes, OUTBOX_PUBLISHED_ROWS: 'delete' }).relay.publishedRows,
    ).toBe('delete');
    expect(() => loadRelayConfig({ OUTBOX_ROUTES: routes, OUTBOX_PUBLISHED_ROWS: 'drop' })).toThrow(
      /^OUTBOX_PUBLISHED_ROWS: expected "keep" or "delete"/,
    );
    // From JavaScript, where the type does not stop it: refused, never taken as keep.
    expect(() => resolveRelayOptions({ publishedRows: 'Delete' as 'delete' })).toThrow(
      /^publishedRows: expected "keep" or "delete" \(got "Delete"\)$/,
    );
  });
});
