import { describe, expect, it } from 'vitest';
import { withTransaction } from '../lib/db/transaction.js';
import { enqueueEvent } from '../lib/outbox/enqueue.js';
import type { OutboxEvent } from '../lib/outbox/types.js';
import type { Publisher, PublishOutcome } from '../lib/publish/types.js';
import { Relay } from '../lib/relay/relay.js';
import { useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';

const db = useTestDatabase();

/** Records what each claim-publish cycle published, in order. */
function recordingPublisher() {
  const batches: string[][] = [];
  const publisher: Publisher = {
    async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
      batches.push(events.map((e) => e.id));
      return events.map((e) => ({ eventId: e.id, ok: true as const, delivered: [] }));
    },
  };
  return { publisher, batches };
}

/**
 * An event written in a transaction left open: it has its seq, lower than
 * anything written after, but is invisible until `commit()`.
 */
async function lateCommit(): Promise<{ straggler: string; commit: () => Promise<void> }> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let inserted!: (id: string) => void;
  const insertedId = new Promise<string>((resolve) => {
    inserted = resolve;
  });
  const late = withTransaction(db.pool, async (client) => {
    inserted(
      await enqueueEvent(client, {
        aggregateType: 'order',
        aggregateId: 'late',
        eventType: 'order.created',
        payload: { late: true },
      }),
    );
    await released;
  });
  const straggler = await insertedId;
  return {
    straggler,
    commit: async () => {
      release();
      await late;
    },
  };
}

describe('unordered claims while draining a backlog start at the last claim’s lowest seq', () => {
  it('a row that committed late below that point is still published, by the next claim from the start', async () => {
    // The straggler takes its seq first and commits after the backlog was claimed.
    const { straggler, commit } = await lateCommit();
    const backlog = await insertEvents(db.pool, 30);
    const { publisher, batches } = recordingPublisher();
    const relay = new Relay({
      db: db.pool,
      publisher,
      options: { batchSize: 10, workers: 1, safetyMarginMs: 0 },
    });

    await relay.processBatch(); // from the start: rows 1-10 of the backlog
    await commit();
    // Now the straggler is committed, with the lowest seq of all pending rows.
    for (let i = 0; i < 6; i++) await relay.processBatch();

    expect(batches.flat().sort()).toEqual([...backlog, straggler].sort());
    // Claims 2 and 3 started at the floor and did not see it; it went out once
    // the backlog was drained and a claim looked from the start again.
    expect(batches[1]).toEqual(backlog.slice(10, 20));
    expect(batches[2]).toEqual(backlog.slice(20, 30));
    expect(batches.flat().at(-1)).toBe(straggler);
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox_events WHERE processed_at IS NULL',
    );
    expect(rows[0].n).toBe(0);
  });

  it('one claim in 20 looks from the start even while the backlog lasts', async () => {
    await db.pool.query('TRUNCATE outbox_events');
    const { straggler, commit } = await lateCommit();
    await insertEvents(db.pool, 300);
    const { publisher, batches } = recordingPublisher();
    const relay = new Relay({
      db: db.pool,
      publisher,
      options: { batchSize: 10, workers: 1, safetyMarginMs: 0 },
      now: () => 0, // the once-a-second rule never fires
    });
    await relay.processBatch();
    await commit();
    for (let i = 1; i < 21; i++) await relay.processBatch();
    // Claims 2-20 started at the floor; claim 21 looked from the start.
    expect(batches.slice(0, 20).flat()).not.toContain(straggler);
    expect(batches[20]?.[0]).toBe(straggler);
  });
});
