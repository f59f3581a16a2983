// Who pays when a relay dies, and for how long an outage may keep an event
// waiting. A relay that dies mid-batch records no outcome: every row of its
// batch is orphaned when the lease expires. Only the row that keeps killing
// the relay may end in dead letters; its neighbours are published. And the
// maximum pending age counts from the first failure since the event was last
// asked to go out, not from when it was written.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { beforeEach, describe, expect, it } from 'vitest';
import { redriveDeadLetters } from '../lib/operations/redrive.js';
import { replayEvents } from '../lib/operations/replay.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import type { Publisher } from '../lib/publish/types.js';
import { Relay } from '../lib/relay/relay.js';
import { claimBatch } from '../lib/sql/claim-batch.js';
import { completeBatch } from '../lib/sql/complete-batch.js';
import { awsClients, createQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

/**
 * Relay invocations with the relay's own claim and outcome statements: each
 * claims a batch; a batch holding the poison event "kills the relay" (no
 * outcome is recorded, the lease runs out), any other is published. Returns
 * how many invocations died.
 */
async function invocations(options: {
  poison: string;
  ordered: boolean;
  maxAttempts: number;
  limit?: number;
}): Promise<{ crashes: number; batches: string[][] }> {
  let crashes = 0;
  const batches: string[][] = [];
  for (let i = 0; i < 100; i++) {
    const leaseId = randomUUID();
    const claim = await claimBatch(db.pool, {
      limit: options.limit ?? 10,
      leaseMs: 60_000,
      leaseId,
      maxAttempts: options.maxAttempts,
      ordered: options.ordered,
      perAggregate: 10,
    });
    if (claim.events.length === 0 && claim.exhausted.length === 0) break;
    const ids = claim.events.map((e) => e.id);
    batches.push(ids);
    if (ids.includes(options.poison)) {
      crashes++;
      // The process is gone; its lease runs out.
      await db.pool.query(
        `UPDATE outbox_events SET locked_until = now() - interval '1 ms' WHERE locked_by = $1`,
        [leaseId],
      );
      continue;
    }
    await completeBatch(
      db.pool,
      leaseId,
      claim.events.map((e) => ({ id: e.id, status: 'published' as const, delivered: [] })),
    );
  }
  return { crashes, batches };
}

async function states() {
  const { rows } = await db.pool.query(
    `SELECT id, attempts, processed_at IS NOT NULL AS published, dead_lettered_at IS NOT NULL AS dead, last_error
     FROM outbox_events ORDER BY seq`,
  );
  return new Map(rows.map((r) => [r.id as string, r]));
}

describe('a poison event that kills the relay', () => {
  it('unordered: only the poison event is dead-lettered; its batch neighbours are published, no attempt spent on them', async () => {
    const ids = await insertEvents(db.pool, 4);
    const poison = ids[2] as string;
    const { crashes } = await invocations({ poison, ordered: false, maxAttempts: 3 });
    const rows = await states();
    expect(rows.get(poison)).toMatchObject({ dead: true, published: false, attempts: 3 });
    expect(rows.get(poison)?.last_error).toMatch(
      /without an outcome after 3 attempts in which it was claimed alone/,
    );
    for (const id of ids.filter((id) => id !== poison)) {
      expect(rows.get(id), id).toMatchObject({ dead: false, published: true, attempts: 1 });
    }
    // The first death took the batch; then the poison event died alone, three times.
    expect(crashes).toBe(4);
  });

  it('ordered: an innocent head before the poison event is published, the poison event alone is dead-lettered, and after a discard its aggregate goes on', async () => {
    // a-0 (innocent head), a-1 (poison), a-2; b-0; c-0.
    const [a0, a1, a2, b0, c0] = await insertEvents(db.pool, 5, (i) => ({
      aggregateId: ['a', 'a', 'a', 'b', 'c'][i] as string,
    }));
    const { batches } = await invocations({ poison: a1 as string, ordered: true, maxAttempts: 3 });
    let rows = await states();
    expect(rows.get(a0 as string)).toMatchObject({ published: true, dead: false });
    expect(rows.get(a1 as string)).toMatchObject({ published: false, dead: true });
    // Held behind its dead letter (block), never tried alone, never dead-lettered.
    expect(rows.get(a2 as string)).toMatchObject({ published: false, dead: false });
    expect(rows.get(b0 as string)).toMatchObject({ published: true, dead: false, attempts: 1 });
    expect(rows.get(c0 as string)).toMatchObject({ published: true, dead: false, attempts: 1 });
    // Never two events of one aggregate out of order: a-0 went before a-1 was tried alone.
    const first = batches.findIndex((b) => b.includes(a0 as string) && !b.includes(a1 as string));
    const alone = batches.findIndex((b) => b.length === 1 && b[0] === a1);
    expect(first).toBeGreaterThanOrEqual(0);
    expect(first).toBeLessThan(alone);

    await redriveDeadLetters(db.pool, { ids: [a1 as string], action: 'discard', requestedBy: 'test' });
    await invocations({ poison: 'none', ordered: true, maxAttempts: 3 });
    rows = await states();
    expect(rows.get(a2 as string)).toMatchObject({ published: true, dead: false, attempts: 1 });
  });

  it('a lease lost because the outcome could not be recorded spends nothing', async () => {
    const ids = await insertEvents(db.pool, 3);
    const claim = await claimBatch(db.pool, {
      limit: 10,
      leaseMs: 60_000,
      leaseId: randomUUID(),
      maxAttempts: 1,
      ordered: false,
    });
    expect(claim.events).toHaveLength(3);
    // The database went away before the outcome: the lease runs out.
    await db.pool.query(`UPDATE outbox_events SET locked_until = now() - interval '1 ms'`);
    // maxAttempts 1: with the lost lease counted, every row would now be a dead letter.
    await invocations({ poison: 'none', ordered: false, maxAttempts: 1 });
    const rows = await states();
    for (const id of ids) expect(rows.get(id)).toMatchObject({ published: true, dead: false, attempts: 1 });
  });
});

/**
 * One relay process of `workers` loops, run until it is idle or dies. A
 * publish of a batch holding the poison event kills the process: from then
 * on nothing it does reaches the database (its pool is closed) and no call of
 * it returns, so every lease it holds runs out without an outcome, as when a
 * Lambda runs out of memory. Each publish first waits (up to 300 ms) for
 * another loop of the process to publish too, so that a second batch is in
 * flight when the poison kills the process whenever the relay allows one.
 */
async function relayProcess(options: {
  poison: string;
  publisher: Publisher;
  batches: string[][];
  maxAttempts: number;
  ordered: boolean;
}): Promise<{ died: boolean }> {
  const pool = new pg.Pool({ connectionString: db.url, max: 4 });
  pool.on('error', () => {});
  let died = false;
  let publishing = 0;
  const others = (n: number) =>
    new Promise<void>((resolve) => {
      const started = Date.now();
      const check = () => (publishing >= n || Date.now() - started > 300 ? resolve() : setTimeout(check, 5));
      check();
    });
  const publisher: Publisher = {
    async publish(events, context) {
      options.batches.push(events.map((e) => e.id));
      publishing++;
      await others(2);
      if (events.some((e) => e.id === options.poison) && !died) {
        died = true;
        void pool.end();
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
      if (died) return new Promise(() => {}); // the process is gone
      try {
        return await options.publisher.publish(events, context);
      } finally {
        publishing--;
      }
    },
  };
  const relay = new Relay({
    db: pool,
    publisher,
    options: {
      workers: 2,
      leaseMs: 1_500,
      maxAttempts: options.maxAttempts,
      safetyMarginMs: 0,
      idleWaitMs: 20,
      ordering: options.ordered ? 'aggregate' : 'none',
    },
  });
  try {
    await relay.run({ remainingMs: () => 60_000, stopWhenIdle: true, skipStats: true });
  } catch (error) {
    if (!died) throw error;
  }
  if (!died) await pool.end();
  return { died };
}

describe('a poison event beside other batches of the same relay', () => {
  for (const ordered of [false, true]) {
    it(`${ordered ? 'ordered' : 'unordered'}: a crash counts against an event only if the relay held nothing else; the innocent event claimed beside the poison event is published`, async () => {
      const queue = await createQueue(aws.sqs, uniqueName('isolation'));
      const routes: RouteConfig[] = [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }];
      const sqsPublisher = createAwsPublisher({
        routes,
        sqs: aws.sqs,
        eventBridge: aws.eventBridge,
        source: 'outbox',
      });
      // innocent, poison: both orphans of one batch that died.
      const [innocent, poison] = (await insertEvents(db.pool, 2, (i) => ({
        aggregateId: `agg-${i}`,
      }))) as [string, string];
      await claimBatch(db.pool, {
        limit: 10,
        leaseMs: 60_000,
        leaseId: randomUUID(),
        maxAttempts: 3,
        ordered,
      });
      await db.pool.query(`UPDATE outbox_events SET locked_until = now() - interval '1 ms'`);

      const batches: string[][] = [];
      let deaths = 0;
      for (let i = 0; i < 10; i++) {
        const { died } = await relayProcess({
          poison,
          publisher: sqsPublisher,
          batches,
          maxAttempts: 3,
          ordered,
        });
        if (!died) break;
        deaths++;
        // The dead relay's leases run out.
        await db.pool.query(
          `UPDATE outbox_events SET locked_until = now() - interval '1 ms' WHERE locked_until > now()`,
        );
      }
      const rows = await states();
      expect(rows.get(innocent)).toMatchObject({ published: true, dead: false, attempts: 1 });
      expect(rows.get(poison)).toMatchObject({ published: false, dead: true, attempts: 3 });
      expect(rows.get(poison)?.last_error).toMatch(/claimed alone/);
      // The poison event died alone three times; nothing else was in flight then.
      expect(deaths).toBe(3);
      expect(batches.filter((b) => b.includes(poison))).toEqual([[poison], [poison], [poison]]);
    });
  }
});

describe('a relay isolating a suspect', () => {
  it('keeps to its time budget: a claim that waited for the suspect publishes only within what is left', async () => {
    const [suspect] = (await insertEvents(db.pool, 1)) as [string];
    await claimBatch(db.pool, {
      limit: 10,
      leaseMs: 60_000,
      leaseId: randomUUID(),
      maxAttempts: 3,
      ordered: false,
    });
    await db.pool.query(`UPDATE outbox_events SET locked_until = now() - interval '1 ms'`);
    await insertEvents(db.pool, 20);
    // The suspect takes 2.5 s; every other call waits for an answer that
    // never comes, until the relay's deadline aborts it.
    const publisher: Publisher = {
      async publish(events, context) {
        if (events.some((e) => e.id === suspect)) {
          await new Promise((resolve) => setTimeout(resolve, 2_500));
          return events.map((e) => ({ eventId: e.id, ok: true as const, delivered: [] }));
        }
        await new Promise((resolve) => context?.signal?.addEventListener('abort', resolve, { once: true }));
        return events.map((e) => ({
          eventId: e.id,
          ok: false as const,
          retryable: true,
          environment: true,
          code: 'DeadlineExceeded',
          error: 'aborted',
          delivered: [],
        }));
      },
    };
    const relay = new Relay({
      db: db.pool,
      publisher,
      options: { workers: 2, batchSize: 5, safetyMarginMs: 0, idleWaitMs: 20 },
    });
    const end = Date.now() + 3_000;
    const started = Date.now();
    const summary = await relay.run({ remainingMs: () => end - Date.now(), skipStats: true });
    // Without the budget counted from before the wait, the second loop's
    // batch would have had 3 s of its own after the suspect's 2.5 s.
    expect(Date.now() - started).toBeLessThan(3_700);
    expect(summary.published).toBe(1);
    expect((await states()).get(suspect)).toMatchObject({ published: true, dead: false });
  });
});

describe('the maximum pending age', () => {
  // A queue that does not exist: a failure of the environment, no attempt spent.
  const missing = (): RouteConfig[] => [
    {
      match: '*',
      targets: [{ type: 'sqs', queueUrl: `${aws.endpoint}/000000000000/${uniqueName('missing')}` }],
    },
  ];
  const options = { maxAttempts: 3, maxPendingAgeMs: 86_400_000, backoff: { baseMs: 60_000 } };
  const age = async (id: string, interval: string) =>
    db.pool.query(`UPDATE outbox_events SET created_at = now() - $2::interval WHERE id = $1`, [id, interval]);

  it('a redriven event two days old is not dead-lettered by the first failure of the environment', async () => {
    const [id] = await insertEvents(db.pool, 1);
    await age(id as string, '2 days');
    await db.pool.query(`UPDATE outbox_events SET dead_lettered_at = now(), last_error = 'x' WHERE id = $1`, [
      id,
    ]);
    await redriveDeadLetters(db.pool, { ids: [id as string] });
    const { relay } = emulatorRelay(db.pool, aws, missing(), options);
    expect(await drainUntilIdle(relay)).toMatchObject({ retried: 1, held: 1, deadLettered: 0 });
  });

  it('a backlog older than the maximum age, left by a relay that was down, is not the target’s fault', async () => {
    const ids = await insertEvents(db.pool, 3);
    for (const id of ids) await age(id, '3 days');
    const { relay } = emulatorRelay(db.pool, aws, missing(), options);
    expect(await drainUntilIdle(relay)).toMatchObject({ retried: 3, held: 3, deadLettered: 0 });
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox_events WHERE failing_since IS NOT NULL',
    );
    expect(rows[0].n).toBe(3);
  });

  it('counts from the first failure: failing for longer than the maximum age dead-letters it; a replay starts the count afresh', async () => {
    const [id] = await insertEvents(db.pool, 1);
    const first = emulatorRelay(db.pool, aws, missing(), options);
    expect(await drainUntilIdle(first.relay)).toMatchObject({ retried: 1, deadLettered: 0 });
    // Still failing a day and an hour later.
    const later = emulatorRelay(db.pool, aws, missing(), options, { now: () => Date.now() + 90_000_000 });
    await db.pool.query('UPDATE outbox_events SET retry_after = now()');
    expect(await drainUntilIdle(later.relay)).toMatchObject({ deadLettered: 1 });
    // Published after a redrive by a working relay; replayed; the replay fails once: not dead.
    await db.pool.query(
      `UPDATE outbox_events SET dead_lettered_at = NULL, processed_at = now(), failing_since = now() - interval '3 days'
       WHERE id = $1`,
      [id],
    );
    await replayEvents(db.pool, { ids: [id as string], requestedBy: 'test' });
    expect(await drainUntilIdle(first.relay)).toMatchObject({ retried: 1, deadLettered: 0 });
  });
});
