import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { beforeEach, describe, expect, it } from 'vitest';
import type { OutboxEvent } from '../lib/outbox/types.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import type { PublishContext, Publisher, PublishOutcome } from '../lib/publish/types.js';
import { Relay } from '../lib/relay/relay.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { eventRows, insertEvents } from './support/events.js';

const db = useTestDatabase({ poolSize: 20 });
const aws = awsClients();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

const drain = (relay: Relay) =>
  relay.run({ remainingMs: () => 120_000, stopWhenIdle: true, skipStats: true });

describe('several relays at once', () => {
  it('4 relays drain 3,000 events to SQS: every event published once, none twice', async () => {
    // Sized for the emulator on 2 cores: moto takes about 15 ms per message
    // here, so 3,000 events (15 claims of 100 per relay) keep the test near a minute.
    const EVENTS = 3_000;
    // moto's SQS slows down quadratically with the depth of one queue, so the
    // events are spread over 20 queues by event type (routing does the split).
    const shards = 20;
    const queues = await Promise.all(
      Array.from({ length: shards }, (_, k) => createQueue(aws.sqs, uniqueName(`relay-4x-${k}`))),
    );
    const ids = await insertEvents(db.pool, EVENTS, (i) => ({ eventType: `order.shard-${i % shards}` }));
    const publisher = createAwsPublisher({
      routes: queues.map((q, k) => ({
        match: `order.shard-${k}`,
        targets: [{ type: 'sqs', queueUrl: q.url }],
      })),
      sqs: aws.sqs,
      eventBridge: aws.eventBridge,
      source: 'outbox',
      concurrency: 8,
    });
    const relays = Array.from(
      { length: 4 },
      () => new Relay({ db: db.pool, publisher, options: { batchSize: 100, workers: 1, safetyMarginMs: 0 } }),
    );
    const summaries = await Promise.all(relays.map(drain));
    // Each relay did part of the work; together exactly all of it.
    expect(summaries.every((s) => s.published > 0)).toBe(true);
    expect(summaries.reduce((n, s) => n + s.published, 0)).toBe(EVENTS);

    const rows = await eventRows(db.pool);
    expect(rows.filter((r) => r.processed_at === null)).toEqual([]);
    expect(rows.every((r) => r.attempts === 1)).toBe(true);

    // Every event was accepted by SQS at least once (that is what marked it
    // processed), so 3,000 messages in the queues means none was sent twice.
    const depths = await Promise.all(
      queues.map(async (q) => {
        const { Attributes } = await aws.sqs.send(
          new GetQueueAttributesCommand({ QueueUrl: q.url, AttributeNames: ['ApproximateNumberOfMessages'] }),
        );
        return Number(Attributes?.ApproximateNumberOfMessages);
      }),
    );
    expect(depths.reduce((a, b) => a + b, 0)).toBe(EVENTS);
    // And one queue, read back in full, holds exactly its share of distinct ids.
    const sample = await drainQueue(aws.sqs, queues[3]?.url as string, EVENTS / shards, 60_000);
    const sampleIds = sample.map((m) => JSON.parse(m.Body as string).id);
    expect(new Set(sampleIds)).toEqual(new Set(ids.filter((_, i) => i % shards === 3)));
    expect(sampleIds).toHaveLength(EVENTS / shards);
  }, 180_000);

  it('per-aggregate ordering holds with 4 relays and a failing aggregate, while others keep flowing', async () => {
    const queue = await createQueue(aws.sqs, `${uniqueName('relay-order')}.fifo`);
    const aggregates = 20;
    const perAggregate = 15;
    // Interleaved: aggregate a's k-th event is row k·aggregates + a.
    await insertEvents(db.pool, aggregates * perAggregate, (i) => ({
      aggregateId: `agg-${i % aggregates}`,
      eventType: 'order.updated',
      payload: { k: Math.floor(i / aggregates) },
    }));
    const real = createAwsPublisher({
      routes: [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
      sqs: aws.sqs,
      eventBridge: aws.eventBridge,
      source: 'outbox',
      concurrency: 4,
    });
    // Fault injection around the real publisher: agg-7's third event is
    // refused (retryably) on its first 3 attempts, and after that for as long
    // as fewer than 10 events of other aggregates went out since it first
    // failed: the window is measured in progress, not in time, so a slow
    // emulator cannot close it before the others had their chance. If the
    // others were held up by agg-7, its event would exhaust its attempts and
    // the counts below would fail. Everything else really goes to the FIFO
    // queue. Publish order is recorded as outcomes come back.
    const published: Array<{ aggregateId: string; k: number }> = [];
    let failures = 0;
    let othersDuringFailure = 0;
    let failing = false;
    const faulty: Publisher = {
      async publish(events: readonly OutboxEvent[], context?: PublishContext): Promise<PublishOutcome[]> {
        const k = (e: OutboxEvent) => (e.payload as { k: number }).k;
        const poisoned = events.filter(
          (e) => e.aggregateId === 'agg-7' && k(e) === 2 && (e.attempts <= 3 || othersDuringFailure < 10),
        );
        // A failing event stops its aggregate, as a real transport does: the
        // events of agg-7 behind it in the same batch are not sent either.
        const behind = events.filter((e) => poisoned.length > 0 && e.aggregateId === 'agg-7' && k(e) > 2);
        const healthy = events.filter((e) => !poisoned.includes(e) && !behind.includes(e));
        const outcomes = await real.publish(healthy, context);
        const ok = new Set(outcomes.filter((o) => o.ok).map((o) => o.eventId));
        for (const e of healthy) {
          if (!ok.has(e.id)) continue;
          published.push({ aggregateId: e.aggregateId, k: k(e) });
          if (failing && e.aggregateId !== 'agg-7') othersDuringFailure++;
        }
        if (poisoned.length > 0) {
          failing = true;
          failures++;
        } else if (healthy.some((e) => e.aggregateId === 'agg-7' && k(e) === 2)) {
          failing = false;
        }
        return [
          ...outcomes,
          ...poisoned.map((e) => ({
            eventId: e.id,
            ok: false as const,
            retryable: true,
            environment: false,
            error: 'injected failure',
            delivered: [],
          })),
          ...behind.map((e) => ({
            eventId: e.id,
            ok: false as const,
            retryable: true,
            environment: true,
            heldBack: true,
            error: 'not sent: an earlier event of agg-7 failed',
            delivered: [],
          })),
        ];
      },
    };
    const relays = Array.from(
      { length: 4 },
      () =>
        new Relay({
          db: db.pool,
          publisher: faulty,
          options: {
            ordering: 'aggregate',
            batchSize: 10,
            workers: 1,
            safetyMarginMs: 0,
            idleWaitMs: 5,
            backoff: { baseMs: 40, factor: 2, maxMs: 200 },
          },
        }),
    );
    // Keep polling until everything is out (backoff means idle moments are not the end).
    const until = async (relay: Relay) => {
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline) {
        await drain(relay);
        const { rows } = await db.pool.query(
          'SELECT count(*)::int AS n FROM outbox_events WHERE processed_at IS NULL',
        );
        if (rows[0].n === 0) return;
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    await Promise.all(relays.map(until));

    expect(failures).toBeGreaterThanOrEqual(3);
    expect(othersDuringFailure).toBeGreaterThanOrEqual(10);
    expect(published).toHaveLength(aggregates * perAggregate);
    // Per aggregate, events were published in their order, each exactly once.
    for (let a = 0; a < aggregates; a++) {
      const ks = published.filter((p) => p.aggregateId === `agg-${a}`).map((p) => p.k);
      expect(ks).toEqual(Array.from({ length: perAggregate }, (_, k) => k));
    }
    // And the FIFO queue hands them out in that order per group.
    const received = await drainQueue(aws.sqs, queue.url, aggregates * perAggregate, 60_000);
    const byGroup = new Map<string, number[]>();
    for (const m of received) {
      const envelope = JSON.parse(m.Body as string);
      const list = byGroup.get(m.Attributes?.MessageGroupId as string) ?? [];
      list.push(envelope.payload.k);
      byGroup.set(m.Attributes?.MessageGroupId as string, list);
    }
    expect(byGroup.size).toBe(aggregates);
    for (const ks of byGroup.values()) expect(ks).toEqual(Array.from({ length: perAggregate }, (_, k) => k));
  }, 120_000);
});
