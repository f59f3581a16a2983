import { randomUUID } from 'node:crypto';
import {
  SendMessageBatchCommand,
  type SendMessageBatchCommandOutput,
  type SendMessageBatchRequestEntry,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import { beforeEach, describe, expect, it } from 'vitest';
import type { OutboxEvent } from '../lib/outbox/types.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import type { PublishContext, Publisher, PublishOutcome } from '../lib/publish/types.js';
import type { RelayOptions } from '../lib/relay/options.js';
import { Relay } from '../lib/relay/relay.js';
import { type ClaimParams, claimBatch } from '../lib/sql/claim-batch.js';
import { discardDeadLetters } from '../lib/sql/redrive-dead-letters.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger } from './support/events.js';
import { drainUntilIdle } from './support/relay.js';

const db = useTestDatabase({ poolSize: 20 });
const aws = awsClients();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

const params = (overrides: Partial<ClaimParams> = {}): ClaimParams => ({
  limit: 100,
  leaseMs: 60_000,
  leaseId: randomUUID(),
  maxAttempts: 20,
  ordered: true,
  perAggregate: 10,
  ...overrides,
});

/** Rows in this order: `spec` is a list of aggregate ids; payload k = the row's index in its aggregate. */
async function fill(spec: string[]) {
  const seen = new Map<string, number>();
  const rows = spec.map((aggregateId) => {
    const k = seen.get(aggregateId) ?? 0;
    seen.set(aggregateId, k + 1);
    return { aggregateId, k };
  });
  await db.pool.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
     SELECT gen_random_uuid(), 'order', r.a, 'order.updated', jsonb_build_object('k', r.k)
     FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS r(a, k, n) ORDER BY r.n`,
    [rows.map((r) => r.aggregateId), rows.map((r) => r.k)],
  );
}

const labels = (events: OutboxEvent[]) =>
  events.map((e) => `${e.aggregateId}${(e.payload as { k: number }).k}`);

describe('ordered claim: runs', () => {
  it("claims a hot aggregate's run together, in order, bounded per aggregate and by the batch", async () => {
    await fill([...Array(30).fill('h'), 'a', 'b', 'a']);
    const claim = await claimBatch(db.pool, params({ limit: 14 }));
    // h's run of 10 (oldest head first), then a's run of 2 and b's of 1, within 14 (in seq order).
    expect(labels(claim.events)).toEqual([
      'h0',
      'h1',
      'h2',
      'h3',
      'h4',
      'h5',
      'h6',
      'h7',
      'h8',
      'h9',
      'a0',
      'b0',
      'a1',
    ]);
    // h is held: nothing of it is claimable until the outcomes are recorded.
    expect(labels((await claimBatch(db.pool, params())).events)).toEqual([]);
    // perAggregate 1 is the head alone (the claim before runs).
    await db.pool.query('UPDATE outbox_events SET locked_until = NULL, locked_by = NULL');
    expect(labels((await claimBatch(db.pool, params({ perAggregate: 1 }))).events)).toEqual([
      'h0',
      'a0',
      'b0',
    ]);
  });

  it('never takes the middle of an aggregate: a row another claim holds locked cuts the run there', async () => {
    await fill(Array(10).fill('h'));
    const other = await db.pool.connect();
    try {
      // Another relay's claim statement, in flight, holds h3's row lock.
      await other.query('BEGIN');
      await other.query(
        `SELECT id FROM outbox_events WHERE aggregate_id = 'h' AND payload->>'k' = '3' FOR UPDATE`,
      );
      const claim = await claimBatch(db.pool, params());
      expect(labels(claim.events)).toEqual(['h0', 'h1', 'h2']);
      await other.query('ROLLBACK');
    } finally {
      other.release();
    }
    // h0..h2 leased: h3.. are not the head's run of anyone else either.
    expect(labels((await claimBatch(db.pool, params())).events)).toEqual([]);
    // Some of the run leased by an expired lease, the head free: the run stops at the first held row.
    await db.pool.query(
      `UPDATE outbox_events SET locked_until = NULL, locked_by = NULL;
       UPDATE outbox_events SET locked_until = now() + interval '1 minute', locked_by = gen_random_uuid()
       WHERE payload->>'k' = '5'`,
    );
    expect(labels((await claimBatch(db.pool, params())).events)).toEqual(['h0', 'h1', 'h2', 'h3', 'h4']);
  });

  it('concurrent claims on one hot aggregate: at most one holds it, always a prefix from its head', async () => {
    await fill(Array(200).fill('h'));
    for (let round = 0; round < 20; round++) {
      const claims = await Promise.all(
        Array.from({ length: 4 }, () => claimBatch(db.pool, params({ limit: 5 + round }))),
      );
      const holders = claims.filter((c) => c.events.length > 0);
      expect(holders.length).toBe(1);
      const { rows } = await db.pool.query(
        `SELECT (payload->>'k')::int AS k FROM outbox_events
         WHERE processed_at IS NULL ORDER BY seq LIMIT 1`,
      );
      const head = rows[0].k as number;
      expect(holders[0]!.events.map((e) => (e.payload as { k: number }).k)).toEqual(
        Array.from({ length: holders[0]!.events.length }, (_, i) => head + i),
      );
      // Record the outcome: published.
      await db.pool.query(
        'UPDATE outbox_events SET processed_at = now(), locked_until = NULL, locked_by = NULL WHERE id = ANY($1::uuid[])',
        [holders[0]!.events.map((e) => e.id)],
      );
    }
  });

  it('block: the run stops before a dead letter and after an exhausted row; skip passes the dead letter', async () => {
    await fill(Array(6).fill('h'));
    await db.pool.query(`UPDATE outbox_events SET dead_lettered_at = now() WHERE payload->>'k' = '3'`);
    expect(labels((await claimBatch(db.pool, params({ deadLetterPolicy: 'block' }))).events)).toEqual([
      'h0',
      'h1',
      'h2',
    ]);
    await db.pool.query('UPDATE outbox_events SET locked_until = NULL, locked_by = NULL');
    expect(labels((await claimBatch(db.pool, params({ deadLetterPolicy: 'skip' }))).events)).toEqual([
      'h0',
      'h1',
      'h2',
      'h4',
      'h5',
    ]);
    // h1 has used every attempt: the claim dead-letters it, and with block nothing behind it is claimed.
    await db.pool.query(
      `UPDATE outbox_events SET locked_until = NULL, locked_by = NULL, dead_lettered_at = NULL;
       UPDATE outbox_events SET attempts = 20, locked_by = gen_random_uuid(), claimed_alone = true,
                                locked_until = now() - interval '1 second' WHERE payload->>'k' = '1'`,
    );
    const claim = await claimBatch(db.pool, params({ deadLetterPolicy: 'block' }));
    expect(labels(claim.events)).toEqual(['h0']);
    expect(claim.exhausted).toHaveLength(1);
  });
});

describe('ordered relay: events held back behind a head that retries', () => {
  /**
   * What the transports answer when a target refuses an aggregate's first
   * event (the environment's fault, held 60 s): the aggregate's later events
   * of the same publish are held back; other aggregates go.
   */
  const refusingHeld: Publisher = {
    async publish(events) {
      const stopped = new Set<string>();
      return events.map((e): PublishOutcome => {
        if (!e.aggregateId.startsWith('held-')) return { eventId: e.id, ok: true, delivered: [] };
        const outcome: PublishOutcome = stopped.has(e.aggregateId)
          ? {
              eventId: e.id,
              ok: false,
              retryable: true,
              environment: true,
              heldBack: true,
              error: 'held back',
              delivered: [],
            }
          : {
              eventId: e.id,
              ok: false,
              retryable: true,
              environment: true,
              error: 'refused',
              retryAfterMs: 60_000,
              delivered: [],
            };
        stopped.add(e.aggregateId);
        return outcome;
      });
    },
  };

  it('are parked until their head is due, so aggregates written after them are claimed at once', async () => {
    const held = Array.from({ length: 100 }, (_, i) => `held-${String(i).padStart(3, '0')}`);
    await fill([...held, ...held]);
    // One claim takes every run (200 rows); the heads are refused, the events behind them held back.
    const relay = new Relay({
      db: db.pool,
      publisher: refusingHeld,
      options: { ordering: 'aggregate', batchSize: 200, workers: 1, safetyMarginMs: 0, idleWaitMs: 5 },
      logger: captureLogger().logger,
      random: () => 0.5,
    });
    const summary = await drainUntilIdle(relay);
    expect(summary.heldBack).toBe(100);
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM outbox_events t
       JOIN outbox_events h ON (h.aggregate_type, h.aggregate_id) = (t.aggregate_type, t.aggregate_id) AND h.seq < t.seq
       WHERE t.retry_after = t.parked_until AND t.parked_until = h.retry_after AND h.retry_after > now() + interval '50 seconds'`,
    );
    expect(rows[0].n).toBe(100);
    // Orders of other aggregates come in (their names sort after the held ones):
    // a claim of 10 finds them, not 100 events that cannot go (it used to
    // return nothing until claims had parked them, 20 rows a claim).
    await fill(['zz-1', 'zz-2', 'zz-3', 'zz-4', 'zz-5']);
    const claim = await claimBatch(db.pool, params({ limit: 10 }));
    expect(labels(claim.events)).toEqual(['zz-10', 'zz-20', 'zz-30', 'zz-40', 'zz-50']);
  });
});

describe('ordered relay: a parked event whose predecessor is published', () => {
  /** 20 rows in front that cannot go for an hour: they fill the claim's walk, so the claim looks further. */
  const blockedInFront = () =>
    db.pool.query(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, retry_after, attempts)
       SELECT gen_random_uuid(), 'order', 'blocked-' || g, 'order.updated', '{}', now() + interval '1 hour', 1
       FROM generate_series(1, 20) g`,
    );

  /** Drains with a relay claiming one event per aggregate; `whilePublishingFirst` runs during its first publish. */
  async function drainOneByOne(whilePublishingFirst: () => Promise<void>): Promise<string[]> {
    const published: string[] = [];
    const publisher: Publisher = {
      async publish(events) {
        if (published.length === 0) await whilePublishingFirst();
        published.push(...labels([...events]));
        return events.map((e) => ({ eventId: e.id, ok: true as const, delivered: [] }));
      },
    };
    const relay = new Relay({
      db: db.pool,
      publisher,
      options: {
        ordering: 'aggregate',
        batchSize: 10,
        maxPerAggregate: 1,
        workers: 1,
        safetyMarginMs: 0,
        idleWaitMs: 5,
      },
      logger: captureLogger().logger,
      random: () => 0.5,
    });
    await drainUntilIdle(relay);
    return published;
  }

  it('is claimable at once, even when another claim held its row as the run was claimed', async () => {
    await blockedInFront();
    await fill(['a', 'a']);
    // a1 parked behind a0 for 10 minutes.
    await db.pool.query(
      `UPDATE outbox_events SET retry_after = now() + interval '10 minutes', parked_until = now() + interval '10 minutes'
       WHERE aggregate_id = 'a' AND payload->>'k' = '1'`,
    );
    // Another relay's claim holds a1 locked (as its `locked` step does with
    // a run it then keeps nothing of) while this relay claims a0, and lets
    // go while a0 is being published.
    const other = await db.pool.connect();
    await other.query('BEGIN');
    await other.query(
      `SELECT 1 FROM outbox_events WHERE aggregate_id = 'a' AND payload->>'k' = '1' FOR UPDATE`,
    );
    const published = await drainOneByOne(async () => {
      await other.query('COMMIT');
      other.release();
    });
    expect(published).toEqual(['a0', 'a1']);
  });

  it('is claimable at once when a claim from an older snapshot parked it while its predecessor was out', async () => {
    await blockedInFront();
    await fill(['x', 'x']);
    // While x0 is being published, another claim that saw it leased parks x1
    // until that lease ends (its snapshot predates this relay's claim).
    const published = await drainOneByOne(async () => {
      await db.pool.query(
        `UPDATE outbox_events SET retry_after = now() + interval '1 minute', parked_until = now() + interval '1 minute'
         WHERE aggregate_id = 'x' AND payload->>'k' = '1'`,
      );
    });
    expect(published).toEqual(['x0', 'x1']);
  });

  it('is not parked by a claim from before the discard that let it go: the discard rewrites it', async () => {
    await fill(['d', 'd', 'd']);
    await db.pool.query(
      `UPDATE outbox_events SET dead_lettered_at = now(), attempts = 1 WHERE payload->>'k' = '0'`,
    );
    const rowVersions = async () =>
      (
        await db.pool.query<{ k: string; xmin: string }>(
          `SELECT payload->>'k' AS k, xmin::text FROM outbox_events ORDER BY seq`,
        )
      ).rows;
    const before = await rowVersions();
    const [dead] = before;
    const { rows } = await db.pool.query(`SELECT id FROM outbox_events WHERE payload->>'k' = '0'`);
    expect(await discardDeadLetters(db.pool, [rows[0].id], 'test')).toEqual(new Set([rows[0].id]));
    const after = await rowVersions();
    // A claim re-checks a row's version (xmin) before parking it: the
    // aggregate's new head (d1) was rewritten, the row behind it left alone.
    expect(after.map((r) => r.k)).toEqual(['0', '1', '2']);
    expect(after[0]?.xmin).not.toBe(dead?.xmin);
    expect(after[1]?.xmin).not.toBe(before[1]?.xmin);
    expect(after[2]?.xmin).toBe(before[2]?.xmin);
  });

  it('goes at once when the relay is switched to ordering none (a park only keeps order)', async () => {
    await fill(['a', 'a']);
    await db.pool.query(
      `UPDATE outbox_events SET retry_after = now() + interval '10 minutes', parked_until = now() + interval '10 minutes'
       WHERE aggregate_id = 'a' AND payload->>'k' = '1'`,
    );
    expect(labels((await claimBatch(db.pool, params({ ordered: false }))).events)).toEqual(['a0', 'a1']);
  });
});

/** SendMessageBatch through a wrapper that can rewrite what the queue gets and what it answers. */
function wrappedSqs(
  sqs: SQSClient,
  refuse: (entry: SendMessageBatchRequestEntry) => 'tail' | 'alone' | undefined,
): Pick<SQSClient, 'send'> {
  return {
    send: (async (command: unknown, options?: unknown) => {
      if (!(command instanceof SendMessageBatchCommand)) {
        return (sqs.send as (c: unknown, o?: unknown) => Promise<unknown>)(command, options);
      }
      const entries = command.input.Entries ?? [];
      const refused: SendMessageBatchRequestEntry[] = [];
      const stopped = new Set<string>();
      for (const entry of entries) {
        const group = entry.MessageGroupId ?? '';
        const how = refuse(entry);
        if (stopped.has(group)) refused.push(entry);
        else if (how) {
          refused.push(entry);
          if (how === 'tail') stopped.add(group);
        }
      }
      const sent = entries.filter((e) => !refused.includes(e));
      const response: SendMessageBatchCommandOutput =
        sent.length > 0
          ? await sqs.send(new SendMessageBatchCommand({ ...command.input, Entries: sent }))
          : { Successful: [], Failed: [], $metadata: {} };
      return {
        ...response,
        Failed: [
          ...(response.Failed ?? []),
          ...refused.map((e) => ({
            Id: e.Id,
            Code: 'InternalError',
            SenderFault: false,
            Message: 'injected',
          })),
        ],
      };
    }) as SQSClient['send'],
  };
}

function orderedRelay(
  sqs: Pick<SQSClient, 'send'>,
  queueUrl: string,
  options: RelayOptions = {},
  onCall?: () => void,
) {
  const log = captureLogger();
  const publisher = createAwsPublisher({
    routes: [{ match: '*', targets: [{ type: 'sqs', queueUrl }] }],
    sqs,
    eventBridge: aws.eventBridge,
    source: 'outbox',
    concurrency: 4,
    onCall,
  });
  const relay = new Relay({
    db: db.pool,
    publisher,
    options: {
      ordering: 'aggregate',
      safetyMarginMs: 0,
      idleWaitMs: 5,
      backoff: { baseMs: 20, factor: 2, maxMs: 100 },
      ...options,
    },
    logger: log.logger,
    random: () => 0.5,
  });
  return { relay, log, publisher };
}

/** Drains until no row is unfinished (backoff makes idle moments not the end). */
async function until(relay: Relay, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    await drainUntilIdle(relay);
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox_events WHERE processed_at IS NULL AND dead_lettered_at IS NULL',
    );
    if (rows[0].n === 0) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('the outbox did not drain');
}

const kOf = (body: string | undefined) => JSON.parse(body as string).payload.k as number;

/** The order in which the outcomes were recorded, per aggregate (processed_at, then seq). */
async function recordedOrder(aggregateId: string): Promise<number[]> {
  const { rows } = await db.pool.query(
    `SELECT (payload->>'k')::int AS k FROM outbox_events WHERE aggregate_id = $1
     ORDER BY processed_at, seq`,
    [aggregateId],
  );
  return rows.map((r) => r.k);
}

describe('ordered relay: a hot aggregate to a FIFO queue', () => {
  it('publishes a 300-event aggregate in order, about ten messages per call', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('hot')}.fifo`);
    await fill(Array(300).fill('h'));
    let calls = 0;
    const { relay } = orderedRelay(aws.sqs, queue.url, { batchSize: 100, workers: 2 }, () => calls++);
    const summary = await drainUntilIdle(relay);
    expect(summary.published).toBe(300);
    expect(summary.heldBack).toBe(0);
    // Ten per call; on a loaded machine a claim now and then ends short of
    // a multiple of ten (seen once in CI: 31 calls), which costs one call.
    expect(calls).toBeGreaterThanOrEqual(30);
    expect(calls).toBeLessThanOrEqual(32);
    const received = await drainQueue(aws.sqs, queue.url, 300, 60_000);
    expect(received.map((m) => kOf(m.Body))).toEqual(Array.from({ length: 300 }, (_, k) => k));
  }, 120_000);

  it('an entry refused in the middle of a batch, with the rest of its group: those go again after it, in order', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('mid-tail')}.fifo`);
    await fill([...Array(25).fill('h'), ...Array(5).fill('o')]);
    let refusals = 0;
    const sqs = wrappedSqs(aws.sqs, (entry) => {
      if (entry.MessageGroupId === 'order:h' && kOf(entry.MessageBody) === 3 && refusals < 2) {
        refusals++;
        return 'tail';
      }
      return undefined;
    });
    const { relay } = orderedRelay(sqs, queue.url, { batchSize: 30 });
    await until(relay);
    expect(refusals).toBe(2);
    expect(await recordedOrder('h')).toEqual(Array.from({ length: 25 }, (_, k) => k));
    const received = await drainQueue(aws.sqs, queue.url, 30, 60_000);
    const group = (g: string) =>
      received.filter((m) => m.Attributes?.MessageGroupId === g).map((m) => kOf(m.Body));
    expect(group('order:h')).toEqual(Array.from({ length: 25 }, (_, k) => k));
    expect(group('order:o')).toEqual([0, 1, 2, 3, 4]);
  }, 120_000);

  it('an entry refused alone while the queue takes the rest of its group (what MiniStack does): the relay records nothing past it and says what the queue got', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('mid-alone')}.fifo`);
    await fill(Array(10).fill('h'));
    let refusals = 0;
    const sqs = wrappedSqs(aws.sqs, (entry) => {
      if (kOf(entry.MessageBody) === 3 && refusals < 1) {
        refusals++;
        return 'alone';
      }
      return undefined;
    });
    const { relay, log } = orderedRelay(sqs, queue.url);
    const first = await relay.processBatch();
    expect(first).toMatchObject({ claimed: 10, published: 3, retried: 1, heldBack: 6 });
    // h4..h9 reached the queue but are not recorded as published before h3.
    const { rows } = await db.pool.query(
      `SELECT (payload->>'k')::int AS k FROM outbox_events WHERE processed_at IS NOT NULL ORDER BY seq`,
    );
    expect(rows.map((r) => r.k)).toEqual([0, 1, 2]);
    expect(log.lines.filter((l) => l.level === 'error').map((l) => l.message)).toEqual(
      Array(6).fill(
        'the target accepted an event after an earlier one of its aggregate failed in the same call; consumers may see them out of order',
      ),
    );
    await until(relay);
    expect(await recordedOrder('h')).toEqual(Array.from({ length: 10 }, (_, k) => k));
    // The queue deduplicated h4..h9 sent again (same MessageDeduplicationId within 5
    // minutes): each message once, h3 after them. This inversion is why
    // docs/ordering.md names maxPerAggregate = 1 for those who cannot accept it.
    const received = await drainQueue(aws.sqs, queue.url, 10, 30_000);
    expect(received.map((m) => kOf(m.Body))).toEqual([0, 1, 2, 4, 5, 6, 7, 8, 9, 3]);
  }, 120_000);

  it('an event SQS would refuse (a character it does not take) fails before the call; with block its successors wait', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('invalid')}.fifo`);
    await fill(Array(6).fill('h'));
    await db.pool.query(
      `UPDATE outbox_events SET payload = jsonb_build_object('k', 3, 'text', 'bad ' || chr(65535))
       WHERE payload->>'k' = '3'`,
    );
    const { relay } = orderedRelay(aws.sqs, queue.url);
    const summary = await drainUntilIdle(relay);
    expect(summary).toMatchObject({ published: 3, deadLettered: 1, heldBack: 2 });
    const { rows } = await db.pool.query(
      `SELECT (payload->>'k')::int AS k, processed_at IS NOT NULL AS published, last_error
       FROM outbox_events WHERE dead_lettered_at IS NOT NULL`,
    );
    expect(rows).toEqual([
      { k: 3, published: false, last_error: 'the message body holds a character SQS does not accept' },
    ]);
    const received = await drainQueue(aws.sqs, queue.url, 3, 10_000);
    expect(received.map((m) => kOf(m.Body))).toEqual([0, 1, 2]);
  }, 60_000);

  it('4 relays on one hot aggregate: never two holding it at once, published and queued in order', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('hot4')}.fifo`);
    // 200 + 40 events: enough for many contended claims (batch 20, 4 relays ×
    // 2 workers); moto's FIFO queue slows down as it fills, so not more.
    await fill([...Array(200).fill('h'), ...Array(40).fill('c')]);
    const real = createAwsPublisher({
      routes: [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
      sqs: aws.sqs,
      eventBridge: aws.eventBridge,
      source: 'outbox',
      concurrency: 4,
    });
    const inFlight = new Set<string>();
    const overlaps: string[] = [];
    const published: Record<string, number[]> = {};
    const watching: Publisher = {
      async publish(events: readonly OutboxEvent[], context?: PublishContext): Promise<PublishOutcome[]> {
        const aggregates = new Set(events.map((e) => e.aggregateId));
        for (const a of aggregates) {
          if (inFlight.has(a)) overlaps.push(a);
          inFlight.add(a);
        }
        try {
          const outcomes = await real.publish(events, context);
          const ok = new Set(outcomes.filter((o) => o.ok).map((o) => o.eventId));
          for (const e of events) {
            if (!ok.has(e.id)) continue;
            const list = published[e.aggregateId] ?? [];
            list.push((e.payload as { k: number }).k);
            published[e.aggregateId] = list;
          }
          return outcomes;
        } finally {
          for (const a of aggregates) inFlight.delete(a);
        }
      },
    };
    const relays = Array.from(
      { length: 4 },
      () =>
        new Relay({
          db: db.pool,
          publisher: watching,
          options: {
            ordering: 'aggregate',
            batchSize: 20,
            workers: 2,
            safetyMarginMs: 0,
            idleWaitMs: 5,
          },
        }),
    );
    await Promise.all(relays.map((r) => until(r, 120_000)));
    expect(overlaps).toEqual([]);
    expect(published.h).toEqual(Array.from({ length: 200 }, (_, k) => k));
    expect(published.c).toEqual(Array.from({ length: 40 }, (_, k) => k));
    const received = await drainQueue(aws.sqs, queue.url, 240, 60_000);
    expect(
      received.filter((m) => m.Attributes?.MessageGroupId === 'order:h').map((m) => kOf(m.Body)),
    ).toEqual(Array.from({ length: 200 }, (_, k) => k));
  }, 240_000);
});
