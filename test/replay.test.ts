import type { Message } from '@aws-sdk/client-sqs';
import type { SQSEvent } from 'aws-lambda';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createConsumer } from '../lib/consumer/consumer.js';
import type { HandlerContext } from '../lib/consumer/handlers.js';
import { ValidationError } from '../lib/errors.js';
import { runCleanup } from '../lib/operations/cleanup.js';
import { type ReplayInput, replayEvents } from '../lib/operations/replay.js';
import { enqueueEvent } from '../lib/outbox/enqueue.js';
import type { Envelope } from '../lib/publish/envelope.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import type { RelayOptions } from '../lib/relay/options.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';
import { toSqsRecord } from './support/sqs-event.js';

const db = useTestDatabase();
const aws = awsClients();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, outbox_replays, processed_events, processed_event_replays');
});

/** Inserts events and marks them published (as the relay would leave them), at `at` if given. */
async function published(
  count: number,
  make: (i: number) => Record<string, unknown> = () => ({}),
  at?: string,
): Promise<string[]> {
  const ids = await insertEvents(db.pool, count, make);
  await db.pool.query(
    `UPDATE outbox_events SET attempts = 1, processed_at = coalesce($2::timestamptz, now())
     WHERE id = ANY($1::uuid[])`,
    [ids, at ?? null],
  );
  return ids;
}

async function snapshot() {
  const { rows: events } = await db.pool.query('SELECT * FROM outbox_events ORDER BY seq');
  const { rows: audit } = await db.pool.query('SELECT * FROM outbox_replays');
  return { events, audit };
}

async function rowsOf(ids: string[]) {
  const { rows } = await db.pool.query(
    `SELECT id, processed_at, first_processed_at, replay_id, replayed_at, replay_count, attempts
     FROM outbox_events WHERE id = ANY($1::uuid[]) ORDER BY seq`,
    [ids],
  );
  return rows;
}

describe('replayEvents', () => {
  it('dry run changes nothing and writes no audit row', async () => {
    const ids = await published(3, () => ({ eventType: 'order.shipped' }));
    await insertEvents(db.pool, 2); // pending: never matched
    const before = await snapshot();

    const result = await replayEvents(db.pool, { eventType: 'order.shipped', dryRun: true });

    expect(result).toEqual({
      action: 'replay',
      dryRun: true,
      replayId: null,
      matched: 3,
      replayed: 0,
      busy: 0,
      ids,
    });
    expect(await snapshot()).toEqual(before);
  });

  it('by id: back to pending with the replay id; first publication kept; audited', async () => {
    const ids = await published(4);
    const [pending] = await insertEvents(db.pool, 1);
    const { rows: firstRows } = await db.pool.query(
      'SELECT id, processed_at FROM outbox_events WHERE id = ANY($1::uuid[]) ORDER BY seq',
      [ids],
    );
    const chosen = [ids[1]!, ids[3]!, pending!];

    const result = await replayEvents(
      db.pool,
      { ids: chosen, requestedBy: 'alice' },
      { caller: { via: 'test' } },
    );

    expect(result).toMatchObject({ action: 'replay', dryRun: false, matched: 2, replayed: 2, busy: 0 });
    expect(result.ids).toEqual([ids[1], ids[3]]);
    expect(result.replayId).toMatch(/^[0-9a-f-]{36}$/);
    const rows = await rowsOf(ids);
    expect(rows.map((r) => [r.processed_at === null, r.replay_id, r.replay_count])).toEqual([
      [false, null, 0],
      [true, result.replayId, 1],
      [false, null, 0],
      [true, result.replayId, 1],
    ]);
    expect(rows[1].first_processed_at).toEqual(firstRows[1].processed_at);
    expect(rows[1].attempts).toBe(0);

    const { rows: audit } = await db.pool.query('SELECT * FROM outbox_replays');
    expect(audit).toEqual([
      {
        id: result.replayId,
        requested_at: expect.any(Date),
        requested_by: 'alice',
        caller: { via: 'test' },
        filter: { ids: chosen, limit: 100, all: false },
        matched: 2,
        replayed: 2,
        event_ids: [ids[1], ids[3]],
      },
    ]);

    // Waiting for the relay: not matched again.
    expect(await replayEvents(db.pool, { ids: chosen })).toMatchObject({ matched: 0, replayed: 0 });
  });

  it('by event type, by aggregate, by window (first published, created)', async () => {
    const old = await published(
      2,
      (i) => ({ eventType: 'invoice.sent', aggregateType: 'invoice', aggregateId: `inv-${i}` }),
      '2025-03-01T10:30:00Z',
    );
    const recent = await published(3, (i) => ({ aggregateId: i === 0 ? 'order-x' : `order-${i}` }));

    expect(await replayEvents(db.pool, { eventType: 'invoice.sent', dryRun: true })).toMatchObject({
      matched: 2,
      ids: old,
    });
    expect(
      await replayEvents(db.pool, { aggregateType: 'order', aggregateId: 'order-x', dryRun: true }),
    ).toMatchObject({ matched: 1, ids: [recent[0]] });
    expect(
      await replayEvents(db.pool, {
        publishedAfter: '2025-03-01T10:00:00Z',
        publishedBefore: '2025-03-01T11:00:00Z',
        dryRun: true,
      }),
    ).toMatchObject({ matched: 2, ids: old });
    await db.pool.query(`UPDATE outbox_events SET created_at = '2025-01-01T00:00:00Z' WHERE id = $1`, [
      recent[2],
    ]);
    expect(
      await replayEvents(db.pool, { createdBefore: '2025-02-01T00:00:00+01:00', dryRun: true }),
    ).toMatchObject({ matched: 1, ids: [recent[2]] });

    // The window is the first publication: once a replay went out (processed_at
    // now), the same window still finds the event.
    const done = await replayEvents(db.pool, { ids: [old[0]!] });
    await db.pool.query('UPDATE outbox_events SET processed_at = now() WHERE id = $1', [old[0]]);
    expect(
      await replayEvents(db.pool, {
        publishedAfter: '2025-03-01T10:00:00Z',
        publishedBefore: '2025-03-01T11:00:00Z',
        dryRun: true,
      }),
    ).toMatchObject({ matched: 2 });
    const [row] = await rowsOf([old[0]!]);
    expect(row.first_processed_at.toISOString()).toBe('2025-03-01T10:30:00.000Z');
    expect(row.replay_id).toBe(done.replayId);
  });

  it('limit: oldest first, the rest on the next call; discarded and dead letters are never replayed', async () => {
    const ids = await published(5, () => ({ eventType: 'order.paid' }));
    const [discarded] = await published(1, () => ({ eventType: 'order.paid' }));
    await db.pool.query(`UPDATE outbox_events SET discarded_at = now() WHERE id = $1`, [discarded]);
    const [dead] = await insertEvents(db.pool, 1, () => ({ eventType: 'order.paid' }));
    await db.pool.query(`UPDATE outbox_events SET dead_lettered_at = now() WHERE id = $1`, [dead]);

    const first = await replayEvents(db.pool, { eventType: 'order.paid', limit: 2 });
    expect(first).toMatchObject({ matched: 5, replayed: 2, ids: ids.slice(0, 2) });
    const second = await replayEvents(db.pool, { eventType: 'order.paid', limit: 10 });
    expect(second).toMatchObject({ matched: 3, replayed: 3, ids: ids.slice(2) });
    expect(second.replayId).not.toBe(first.replayId);
    const { rows } = await db.pool.query(
      'SELECT replayed, matched FROM outbox_replays ORDER BY requested_at',
    );
    expect(rows).toEqual([
      { matched: 5, replayed: 2 },
      { matched: 3, replayed: 3 },
    ]);
  });

  it('validates: unknown keys, bad ids, limits, windows, an empty filter; nothing changes', async () => {
    await published(2);
    const before = await snapshot();
    const cases: Array<[unknown, string, RegExp]> = [
      [{ eventTyp: 'x' }, 'eventTyp', /is not a replay option/],
      [{ ids: ['nope'] }, 'ids[0]', /must be a UUID/],
      [{ all: true, limit: 10_001 }, 'limit', /at most 10000/],
      [{ publishedAfter: '2025-03-01T10:00:00' }, 'publishedAfter', /offset/],
      [
        { createdAfter: '2025-03-02T00:00:00Z', createdBefore: '2025-03-01T00:00:00Z' },
        'createdAfter',
        /earlier than createdBefore/,
      ],
      [{}, 'all', /no filter given/],
      [{ action: 'redrive', all: true }, 'action', /must be "replay"/],
    ];
    for (const [input, field, message] of cases) {
      const error = await replayEvents(db.pool, input as ReplayInput).catch((e: unknown) => e);
      expect(error, JSON.stringify(input)).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe(field);
      expect((error as ValidationError).message).toMatch(message);
    }
    expect(await snapshot()).toEqual(before);
  });

  it('an aggregate a relay is publishing right now is left for the next call (busy)', async () => {
    const [a1, b1] = await published(2, (i) => ({ aggregateId: i === 0 ? 'busy' : 'free' }));
    const [a2] = await insertEvents(db.pool, 1, () => ({ aggregateId: 'busy' }));
    await db.pool.query(
      `UPDATE outbox_events SET locked_until = now() + interval '1 minute', locked_by = gen_random_uuid(), attempts = 1
       WHERE id = $1`,
      [a2],
    );
    const dry = await replayEvents(db.pool, { ids: [a1!, b1!], dryRun: true });
    expect(dry).toMatchObject({ matched: 2, busy: 1, ids: [b1] });
    const result = await replayEvents(db.pool, { ids: [a1!, b1!] });
    expect(result).toMatchObject({ matched: 2, replayed: 1, busy: 1, ids: [b1] });

    // The lease ends (the relay recorded its outcome): the next call takes it.
    await db.pool.query(
      'UPDATE outbox_events SET locked_until = NULL, locked_by = NULL, processed_at = now() WHERE id = $1',
      [a2],
    );
    expect(await replayEvents(db.pool, { ids: [a1!] })).toMatchObject({ replayed: 1, busy: 0 });
  });

  it('busy too: an aggregate a producer is writing, or whose head a claim holds, right now', async () => {
    const [written, claimed, free] = await published(3, (i) => ({ aggregateId: `agg-${i}` }));
    const [head] = await insertEvents(db.pool, 1, () => ({ aggregateId: 'agg-1' }));
    const producer = await db.pool.connect();
    const claim = await db.pool.connect();
    try {
      // A producer's open transaction holds agg-0's aggregate lock row.
      await producer.query('BEGIN');
      await enqueueEvent(producer, {
        aggregateType: 'order',
        aggregateId: 'agg-0',
        eventType: 'order.created',
        payload: {},
      });
      // A claim statement in progress holds agg-1's head row.
      await claim.query('BEGIN');
      await claim.query('SELECT id FROM outbox_events WHERE id = $1 FOR UPDATE', [head]);

      const result = await replayEvents(db.pool, { ids: [written!, claimed!, free!] });
      expect(result).toMatchObject({ matched: 3, replayed: 1, busy: 2, ids: [free] });
    } finally {
      await producer.query('ROLLBACK');
      await claim.query('ROLLBACK');
      producer.release();
      claim.release();
    }
    expect(await replayEvents(db.pool, { ids: [written!, claimed!] })).toMatchObject({
      replayed: 2,
      busy: 0,
    });
  });

  it('cleanup keeps events waiting to be replayed (and their audit row), deletes the rest by retention', async () => {
    const ids = await published(3, () => ({}), '2025-01-01T00:00:00Z');
    const result = await replayEvents(db.pool, { ids: [ids[0]!] });
    await db.pool.query(`UPDATE outbox_replays SET requested_at = '2025-01-02T00:00:00Z'`);

    const report = await runCleanup(
      { db: db.pool, options: { outboxRetentionDays: 0, replayRetentionDays: 1 } },
      { remainingMs: () => 60_000 },
    );

    expect(report.outboxEvents.deleted).toBe(2);
    expect(report.replays?.deleted).toBe(0);
    const { rows } = await db.pool.query('SELECT id FROM outbox_events');
    expect(rows).toEqual([{ id: ids[0] }]);
    const { rows: audit } = await db.pool.query('SELECT id FROM outbox_replays');
    expect(audit).toEqual([{ id: result.replayId }]);

    // Once republished, the audit row ages out like any other.
    await db.pool.query('UPDATE outbox_events SET processed_at = now() WHERE id = $1', [ids[0]]);
    const again = await runCleanup(
      { db: db.pool, options: { outboxRetentionDays: 7, replayRetentionDays: 1 } },
      { remainingMs: () => 60_000 },
    );
    expect(again.replays?.deleted).toBe(1);
  });
});

describe('replay through the relay and the consumer (emulator)', () => {
  let queue: { url: string; arn: string };
  let fifo: { url: string; arn: string };

  beforeAll(async () => {
    queue = await createQueue(aws.sqs, uniqueName('replay'));
    fifo = await createQueue(aws.sqs, `${uniqueName('replay')}.fifo`);
  });

  const relay = (routes: RouteConfig[], options: RelayOptions = {}) =>
    drainUntilIdle(emulatorRelay(db.pool, aws, routes, options).relay);
  const routesTo = (url: string): RouteConfig[] => [
    { match: '*', targets: [{ type: 'sqs', queueUrl: url }] },
  ];

  function sqsEvent(messages: Message[], arn: string): SQSEvent {
    return { Records: messages.map((m) => toSqsRecord(m, arn)) };
  }

  function consumerWith(replays: 'skip' | 'handle' | undefined, seen: Array<[string, string | undefined]>) {
    return createConsumer({
      name: `replay-consumer-${replays ?? 'default'}`,
      pool: db.pool,
      handlers: {
        'order.created': async (event: Envelope, _tx, context: HandlerContext) => {
          seen.push([event.id, context.replay?.id]);
        },
      },
      ...(replays ? { replays } : {}),
    });
  }

  it('the republished message carries the marker; default consumers skip it, replays: handle runs once per replay', async () => {
    const ids = await insertEvents(db.pool, 2);
    expect(await relay(routesTo(queue.url))).toMatchObject({ published: 2 });
    const originals = await drainQueue(aws.sqs, queue.url, 2);
    expect(originals).toHaveLength(2);
    for (const m of originals) {
      expect(JSON.parse(m.Body!).replayId).toBeUndefined();
      expect(m.MessageAttributes?.replayId).toBeUndefined();
    }

    const seenSkip: Array<[string, string | undefined]> = [];
    const seenHandle: Array<[string, string | undefined]> = [];
    const skip = consumerWith(undefined, seenSkip);
    const handle = consumerWith('handle', seenHandle);
    for (const c of [skip, handle]) {
      expect(await c.handleSqsEvent(sqsEvent(originals, queue.arn))).toMatchObject({ processed: 2 });
    }

    const replayed = await replayEvents(db.pool, { ids: [ids[0]!], requestedBy: 'test' });
    expect(replayed.replayed).toBe(1);
    expect(await relay(routesTo(queue.url))).toMatchObject({ published: 1, deadLettered: 0 });
    const [message, ...rest] = await drainQueue(aws.sqs, queue.url, 1);
    expect(rest).toEqual([]);
    expect(JSON.parse(message!.Body!)).toMatchObject({ id: ids[0], replayId: replayed.replayId });
    expect(message!.MessageAttributes?.replayId).toEqual({
      DataType: 'String',
      StringValue: replayed.replayId,
    });
    const { rows } = await db.pool.query(
      'SELECT processed_at IS NOT NULL AS published, first_processed_at < processed_at AS later FROM outbox_events WHERE id = $1',
      [ids[0]],
    );
    expect(rows).toEqual([{ published: true, later: true }]);

    // Default: a duplicate. handle: handled, with context.replay; then a
    // redelivery of the same replay is a duplicate.
    const replayEvent = sqsEvent([message!], queue.arn);
    expect(await skip.handleSqsEvent(replayEvent)).toMatchObject({ processed: 0, duplicates: 1 });
    expect(await handle.handleSqsEvent(replayEvent)).toMatchObject({ processed: 1, duplicates: 0 });
    expect(await handle.handleSqsEvent(replayEvent)).toMatchObject({ processed: 0, duplicates: 1 });
    expect(seenSkip.filter(([, r]) => r)).toEqual([]);
    expect(seenHandle.filter(([, r]) => r)).toEqual([[ids[0], replayed.replayId]]);

    // A second replay is handled once more.
    const second = await replayEvents(db.pool, { ids: [ids[0]!] });
    await relay(routesTo(queue.url));
    const [again] = await drainQueue(aws.sqs, queue.url, 1);
    expect(await handle.handleSqsEvent(sqsEvent([again!], queue.arn))).toMatchObject({ processed: 1 });
    expect(seenHandle.filter(([, r]) => r)).toEqual([
      [ids[0], replayed.replayId],
      [ids[0], second.replayId],
    ]);
    const { rows: dedupe } = await db.pool.query(
      'SELECT consumer, replay_id FROM processed_event_replays ORDER BY processed_at',
    );
    expect(dedupe).toEqual([
      { consumer: 'replay-consumer-handle', replay_id: replayed.replayId },
      { consumer: 'replay-consumer-handle', replay_id: second.replayId },
    ]);
  });

  it('a consumer that never saw the event handles its replay by default (a first delivery)', async () => {
    const [id] = await insertEvents(db.pool, 1);
    await relay(routesTo(queue.url));
    await drainQueue(aws.sqs, queue.url, 1);
    await replayEvents(db.pool, { ids: [id!] });
    await relay(routesTo(queue.url));
    const messages = await drainQueue(aws.sqs, queue.url, 1);
    const seen: Array<[string, string | undefined]> = [];
    const late = createConsumer({
      name: 'late-consumer',
      pool: db.pool,
      handlers: { 'order.created': async (e, _tx, context) => void seen.push([e.id, context.replay?.id]) },
    });
    expect(await late.handleSqsEvent(sqsEvent(messages, queue.arn))).toMatchObject({ processed: 1 });
    expect(seen[0]![0]).toBe(id);
    expect(seen[0]![1]).toEqual(expect.any(String));
  });

  it('a replay of an old event waits out an outage like a new one: its pending age counts from the replay', async () => {
    const [id] = await published(1, () => ({}), '2025-01-01T00:00:00Z');
    await db.pool.query(`UPDATE outbox_events SET created_at = now() - interval '30 days' WHERE id = $1`, [
      id,
    ]);
    await replayEvents(db.pool, { ids: [id!] });
    const missing = queue.url.replace(/[^/]+$/, uniqueName('no-such-queue'));
    const summary = await relay(routesTo(missing));
    expect(summary).toMatchObject({ claimed: 1, published: 0, deadLettered: 0, held: 1 });
    const { rows } = await db.pool.query(
      'SELECT processed_at, dead_lettered_at, attempts, replay_id IS NOT NULL AS replay FROM outbox_events',
    );
    expect(rows).toEqual([{ processed_at: null, dead_lettered_at: null, attempts: 0, replay: true }]);
  });

  it('FIFO: the replay is not deduplicated away, and goes before the aggregate pending events (ordered)', async () => {
    const ordered: RelayOptions = { ordering: 'aggregate', maxPerAggregate: 10 };
    const ids = await insertEvents(db.pool, 2, (i) => ({ aggregateId: 'fifo-1', payload: { n: i } }));
    // The originals stay on the queue: their deduplication ids are fresh.
    expect(await relay(routesTo(fifo.url), ordered)).toMatchObject({ published: 2 });

    // Written after the originals went out, still pending when the replay is asked for.
    const [later] = await insertEvents(db.pool, 1, () => ({ aggregateId: 'fifo-1', payload: { n: 2 } }));
    // Within SQS's five-minute deduplication window of the originals.
    const replayed = await replayEvents(db.pool, { aggregateType: 'order', aggregateId: 'fifo-1' });
    expect(replayed).toMatchObject({ matched: 2, replayed: 2, ids });

    expect(await relay(routesTo(fifo.url), ordered)).toMatchObject({ published: 3, deadLettered: 0 });
    const received = await drainQueue(aws.sqs, fifo.url, 5, 10_000);
    expect(
      received.map((m) => {
        const body = JSON.parse(m.Body!);
        return [body.id, body.replayId ?? null];
      }),
    ).toEqual([
      [ids[0], null],
      [ids[1], null],
      [ids[0], replayed.replayId],
      [ids[1], replayed.replayId],
      [later, null],
    ]);
    expect(received.map((m) => m.Attributes?.MessageDeduplicationId)).toEqual([
      ids[0],
      ids[1],
      `${ids[0]}:${replayed.replayId}`,
      `${ids[1]}:${replayed.replayId}`,
      later,
    ]);
  });
});
