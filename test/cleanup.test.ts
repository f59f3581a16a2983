import { beforeEach, describe, expect, it } from 'vitest';
import { runCleanup } from '../lib/operations/cleanup.js';
import { loadCleanupConfig } from '../lib/operations/cleanup-config.js';
import { redriveDeadLetters } from '../lib/operations/redrive.js';
import { enqueueEvent } from '../lib/outbox/enqueue.js';
import { claimBatch } from '../lib/sql/claim-batch.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger, captureMetrics } from './support/events.js';

const db = useTestDatabase();

beforeEach(async () => {
  await db.pool.query(
    'TRUNCATE outbox_events, processed_events, outbox_aggregate_locks, processed_event_replays, outbox_replays',
  );
});

/** Inserts `count` outbox rows in one statement; `state` is SQL for the per-row columns. */
async function outboxRows(
  count: number,
  state: { processedDaysAgo?: number; deadDaysAgo?: number; eventType?: string },
): Promise<void> {
  await db.pool.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, attempts,
                                created_at, processed_at, dead_lettered_at)
     SELECT gen_random_uuid(), 'order', 'order-' || g, $2, jsonb_build_object('i', g), 1,
            now() - interval '200 days',
            now() - make_interval(days => $3::int),
            now() - make_interval(days => $4::int)
     FROM generate_series(1, $1::int) AS g`,
    [count, state.eventType ?? 'order.created', state.processedDaysAgo ?? null, state.deadDaysAgo ?? null],
  );
}

async function dedupeRows(count: number, daysAgo: number): Promise<void> {
  await db.pool.query(
    `INSERT INTO processed_events (consumer, event_id, event_type, processed_at)
     SELECT 'orders', gen_random_uuid(), 'order.created', now() - make_interval(days => $2::int)
     FROM generate_series(1, $1::int)`,
    [count, daysAgo],
  );
}

/** `count` rows past retention in each of the tables after the first two: idle locks, replay dedupe, replay audit. */
async function otherTablesRows(count: number): Promise<void> {
  await db.pool.query(
    `INSERT INTO outbox_aggregate_locks (aggregate_type, aggregate_id, created_at)
     SELECT 'order', 'idle-' || g, now() - interval '30 days' FROM generate_series(1, $1::int) g`,
    [count],
  );
  await db.pool.query(
    `INSERT INTO processed_event_replays (consumer, event_id, replay_id, processed_at)
     SELECT 'orders', gen_random_uuid(), gen_random_uuid(), now() - interval '40 days'
     FROM generate_series(1, $1::int)`,
    [count],
  );
  await db.pool.query(
    `INSERT INTO outbox_replays (id, requested_at, requested_by, filter, matched, replayed, event_ids)
     SELECT gen_random_uuid(), now() - interval '400 days', 'alice', '{}', 0, 0, '{}'
     FROM generate_series(1, $1::int)`,
    [count],
  );
}

async function census() {
  const { rows } = await db.pool.query(`
    SELECT
      count(*) FILTER (WHERE processed_at < now() - interval '7 days')::int AS old_processed,
      count(*) FILTER (WHERE processed_at >= now() - interval '7 days')::int AS recent_processed,
      count(*) FILTER (WHERE processed_at IS NULL AND dead_lettered_at IS NULL)::int AS pending,
      count(*) FILTER (WHERE dead_lettered_at IS NOT NULL)::int AS dead,
      (SELECT count(*) FROM processed_events WHERE processed_at < now() - interval '30 days')::int AS old_dedupe,
      (SELECT count(*) FROM processed_events WHERE processed_at >= now() - interval '30 days')::int AS recent_dedupe
    FROM outbox_events`);
  return rows[0];
}

const plenty = () => 300_000;

describe('runCleanup', () => {
  it('100,000 processed rows: deletes only what retention says, in bounded batches; pending rows and dead letters stay', async () => {
    await outboxRows(80_000, { processedDaysAgo: 10 });
    await outboxRows(20_000, { processedDaysAgo: 1 });
    await outboxRows(50, {}); // pending, and created long ago: age alone never deletes
    await outboxRows(30, { deadDaysAgo: 400 }); // dead letters are kept by default, however old
    await dedupeRows(25_000, 40);
    await dedupeRows(15_000, 5);
    expect(await census()).toEqual({
      old_processed: 80_000,
      recent_processed: 20_000,
      pending: 50,
      dead: 30,
      old_dedupe: 25_000,
      recent_dedupe: 15_000,
    });

    const log = captureLogger();
    const metrics = captureMetrics();
    const report = await runCleanup(
      {
        db: db.pool,
        options: loadCleanupConfig({}), // the defaults: 7 days, 30 days, dead letters kept, 5,000 a batch
        logger: log.logger,
        metrics: metrics.metrics,
      },
      { remainingMs: plenty },
    );

    expect(report).toMatchObject({
      finished: true,
      stoppedBecause: 'done',
      batchSize: 5000,
      // 16 full batches, then one that finds nothing left.
      outboxEvents: { deleted: 80_000, statements: 17, finished: true },
      processedEvents: { deleted: 25_000, statements: 6, finished: true },
      deadLetters: null,
    });
    expect(await census()).toEqual({
      old_processed: 0,
      recent_processed: 20_000,
      pending: 50,
      dead: 30,
      old_dedupe: 0,
      recent_dedupe: 15_000,
    });

    // Every statement was bounded by the batch size.
    const batches = log.lines.filter((l) => l.message === 'cleanup batch').map((l) => l.extra);
    // 17 + 6 + one (empty) each for idle aggregate lock rows, replay dedupe rows and replay audit rows.
    expect(batches).toHaveLength(26);
    expect(batches.every((b) => (b.deleted as number) <= 5000)).toBe(true);
    expect(batches.filter((b) => b.table === 'outbox_events').map((b) => b.deleted)).toEqual([
      ...Array(16).fill(5000),
      0,
    ]);
    expect(metrics.records).toEqual(
      expect.arrayContaining([
        { name: 'OutboxEventsDeleted', unit: 'Count', value: 80_000, dimensions: undefined },
        { name: 'ProcessedEventsDeleted', unit: 'Count', value: 25_000, dimensions: undefined },
        { name: 'DeadLettersDeleted', unit: 'Count', value: 0, dimensions: undefined },
        { name: 'CleanupUnfinished', unit: 'Count', value: 0, dimensions: undefined },
      ]),
    );
    expect(log.lines.find((l) => l.message === 'cleanup finished')?.extra).toMatchObject({
      outbox_events_deleted: 80_000,
      processed_events_deleted: 25_000,
      statements: 26,
      finished: true,
    });

    // Nothing left to do: one empty statement per table.
    const again = await runCleanup({ db: db.pool }, { remainingMs: plenty });
    expect(again).toMatchObject({
      finished: true,
      outboxEvents: { deleted: 0, statements: 1 },
      processedEvents: { deleted: 0, statements: 1 },
    });
  });

  it('every table gets its share: a budget that cannot finish outbox_events still reaches the other five; the next run finishes', async () => {
    await outboxRows(12_000, { processedDaysAgo: 10 });
    await outboxRows(5, { deadDaysAgo: 400 });
    await dedupeRows(3_000, 40);
    await otherTablesRows(10);
    // Plenty of time for nine batches, then the budget is nearly spent.
    let checks = 0;
    const remainingMs = () => (++checks <= 9 ? 60_000 : 4_000);
    const log = captureLogger();
    const metrics = captureMetrics();
    const options = { batchSize: 1000, safetyMarginMs: 5_000, deadLetterRetentionDays: 90 };

    const report = await runCleanup(
      { db: db.pool, options, logger: log.logger, metrics: metrics.metrics },
      { remainingMs },
    );
    // One batch per unfinished table per round: round 1 reaches all six (the
    // four small ones finish), rounds 2 and 3 share what is left.
    expect(report).toMatchObject({
      finished: false,
      stoppedBecause: 'time',
      outboxEvents: { deleted: 3000, statements: 3, finished: false },
      processedEvents: { deleted: 2000, statements: 2, finished: false },
      deadLetters: { deleted: 5, statements: 1, finished: true },
      aggregateLocks: { deleted: 10, statements: 1, finished: true },
      processedEventReplays: { deleted: 10, statements: 1, finished: true },
      replays: { deleted: 10, statements: 1, finished: true },
    });
    expect(log.lines.filter((l) => l.message === 'cleanup batch').map((l) => l.extra.table)).toEqual([
      'outbox_events',
      'processed_events',
      'dead letters',
      'outbox_aggregate_locks',
      'processed_event_replays',
      'outbox_replays',
      'outbox_events',
      'processed_events',
      'outbox_events',
    ]);
    expect(await census()).toMatchObject({ old_processed: 9000, old_dedupe: 1000, dead: 0 });
    expect(log.lines.find((l) => l.level === 'warn')?.message).toMatch(/stopped early/);
    expect(metrics.records).toEqual(
      expect.arrayContaining([
        { name: 'OutboxEventsDeleted', unit: 'Count', value: 3000, dimensions: undefined },
        { name: 'ProcessedEventsDeleted', unit: 'Count', value: 2000, dimensions: undefined },
        { name: 'DeadLettersDeleted', unit: 'Count', value: 5, dimensions: undefined },
        { name: 'AggregateLocksDeleted', unit: 'Count', value: 10, dimensions: undefined },
        { name: 'ReplaysDeleted', unit: 'Count', value: 10, dimensions: undefined },
        { name: 'CleanupUnfinished', unit: 'Count', value: 1, dimensions: undefined },
      ]),
    );

    const rest = await runCleanup({ db: db.pool, options }, { remainingMs: plenty });
    expect(rest).toMatchObject({
      finished: true,
      outboxEvents: { deleted: 9000, statements: 10 },
      processedEvents: { deleted: 1000, statements: 2 },
    });
  });

  it('a rate limit below what outbox_events needs still deletes from every other table in the same run', async () => {
    await outboxRows(20_000, { processedDaysAgo: 10 });
    await outboxRows(5, { deadDaysAgo: 400 });
    await dedupeRows(2_000, 40);
    await otherTablesRows(10);
    // 100 rows at 1,000/s: a batch lasts 0.1 s, so the 1 s before the margin
    // hold about ten batches, a twentieth of outbox_events.
    const deadline = Date.now() + 1_500;
    const report = await runCleanup(
      {
        db: db.pool,
        options: {
          batchSize: 100,
          maxRowsPerSecond: 1_000,
          safetyMarginMs: 500,
          deadLetterRetentionDays: 90,
        },
      },
      { remainingMs: () => deadline - Date.now() },
    );
    expect(Date.now()).toBeLessThan(deadline);
    expect(report.finished).toBe(false);
    expect(report.outboxEvents.finished).toBe(false);
    expect(report.outboxEvents.deleted).toBeGreaterThan(0);
    expect(report.processedEvents.deleted).toBeGreaterThan(0);
    expect(report.processedEvents.deleted).toBe(report.processedEvents.statements * 100);
    expect(report).toMatchObject({
      deadLetters: { deleted: 5, finished: true },
      aggregateLocks: { deleted: 10, finished: true },
      processedEventReplays: { deleted: 10, finished: true },
      replays: { deleted: 10, finished: true },
    });
    // The limit holds across tables: no more rows than 1,000/s over the run.
    const total = report.outboxEvents.deleted + report.processedEvents.deleted + 5 + 10 + 10 + 10;
    expect(total).toBeLessThanOrEqual(Math.ceil((report.durationMs / 1000) * 1_000) + 100);
  });

  it('a batch whose pace the safety margin cuts short is the last: the rate limit is not outrun by more than one batch', async () => {
    await outboxRows(2_000, { processedDaysAgo: 10 });
    // Always 5 ms before the margin: each batch's 100 ms pace is cut to 5 ms.
    const report = await runCleanup(
      { db: db.pool, options: { batchSize: 100, maxRowsPerSecond: 1_000, safetyMarginMs: 500 } },
      { remainingMs: () => 505 },
    );
    expect(report.stoppedBecause).toBe('time');
    expect(report.finished).toBe(false);
    expect(report.outboxEvents).toMatchObject({ deleted: 100, statements: 1 });
  });

  it('stops on a real clock too: a 1.5 s budget with a 1 s margin returns well before the deadline', async () => {
    // 6,000 statements of 10 rows: far more than half a second of work.
    await outboxRows(60_000, { processedDaysAgo: 10 });
    const deadline = Date.now() + 1500;
    const report = await runCleanup(
      { db: db.pool, options: { batchSize: 10, safetyMarginMs: 1000 } },
      { remainingMs: () => deadline - Date.now() },
    );
    expect(Date.now()).toBeLessThan(deadline);
    expect(report.finished).toBe(false);
    expect(report.outboxEvents.deleted).toBeGreaterThan(0);
    expect(report.outboxEvents.deleted).toBeLessThan(60_000);
    expect(report.outboxEvents.deleted).toBe(report.outboxEvents.statements * 10);
  });

  it('maxRowsPerSecond spreads the deletes: 3,000 rows at 2,000/s take at least 1.5 s, all deleted; without it, a fraction of that', async () => {
    await outboxRows(3_000, { processedDaysAgo: 10 });
    let started = performance.now();
    const capped = await runCleanup(
      { db: db.pool, options: { batchSize: 500, maxRowsPerSecond: 2_000 } },
      { remainingMs: plenty },
    );
    const cappedMs = performance.now() - started;
    expect(capped).toMatchObject({ finished: true, outboxEvents: { deleted: 3_000, statements: 7 } });
    expect(cappedMs).toBeGreaterThanOrEqual(1_500);

    await outboxRows(3_000, { processedDaysAgo: 10 });
    started = performance.now();
    const free = await runCleanup({ db: db.pool, options: { batchSize: 500 } }, { remainingMs: plenty });
    expect(free.outboxEvents.deleted).toBe(3_000);
    expect(performance.now() - started).toBeLessThan(cappedMs / 2);
  });

  it('a rate limit never waits past the safety margin: the run stops unfinished instead', async () => {
    await outboxRows(3_000, { processedDaysAgo: 10 });
    const deadline = Date.now() + 2_000;
    const report = await runCleanup(
      { db: db.pool, options: { batchSize: 500, maxRowsPerSecond: 100, safetyMarginMs: 1_000 } },
      { remainingMs: () => deadline - Date.now() },
    );
    // 500 rows at 100/s would be due 5 s in; the margin begins 1 s in.
    expect(Date.now()).toBeLessThan(deadline);
    expect(report).toMatchObject({ finished: false, outboxEvents: { deleted: 500, statements: 1 } });
  });

  it('a rate limit of 0 or below is refused', async () => {
    await expect(
      runCleanup({ db: db.pool, options: { maxRowsPerSecond: 0 } }, { remainingMs: plenty }),
    ).rejects.toThrow(/^maxRowsPerSecond: expected a number of rows > 0, or null \(got 0\)$/);
  });

  it('dead letters are discarded (on record) only when a retention is configured, by dead_lettered_at against a pinned now', async () => {
    await db.pool.query(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, dead_lettered_at)
       VALUES (gen_random_uuid(), 'order', 'a', 'order.created', '{}', '2025-01-01T00:00:00Z'),
              (gen_random_uuid(), 'order', 'b', 'order.created', '{}', '2025-03-01T23:59:59Z'),
              (gen_random_uuid(), 'order', 'c', 'order.created', '{}', '2025-03-02T00:00:00Z'),
              (gen_random_uuid(), 'order', 'd', 'order.created', '{}', '2025-05-01T00:00:00Z')`,
    );
    const now = new Date('2025-05-31T00:00:00Z'); // 90 days later is 2025-03-02T00:00:00Z
    const options = loadCleanupConfig({ OUTBOX_DEAD_LETTER_RETENTION_DAYS: '90' });
    const report = await runCleanup({ db: db.pool, options }, { remainingMs: plenty, now });
    expect(report.deadLetters).toEqual({
      cutoff: new Date('2025-03-02T00:00:00Z'),
      deleted: 2,
      statements: 1,
      finished: true,
    });
    const { rows } = await db.pool.query(
      'SELECT aggregate_id FROM outbox_events WHERE dead_lettered_at IS NOT NULL ORDER BY aggregate_id',
    );
    expect(rows.map((r) => r.aggregate_id)).toEqual(['c', 'd']);
    // The two past retention are discards on record, not silently gone; the
    // outbox retention deletes them later, with the published rows.
    const discarded = await db.pool.query(
      'SELECT aggregate_id, discarded_by FROM outbox_discarded_events ORDER BY aggregate_id',
    );
    expect(discarded.rows).toEqual([
      { aggregate_id: 'a', discarded_by: 'cleanup: dead-letter retention' },
      { aggregate_id: 'b', discarded_by: 'cleanup: dead-letter retention' },
    ]);
  });
});

describe('dead letters past retention that block their aggregate', () => {
  /** One row per statement, so seq follows the order of the calls. */
  async function row(
    aggregate: string,
    state: 'dead' | 'recent-dead' | 'pending' | 'processed',
    aggregateType = 'order',
  ): Promise<void> {
    await db.pool.query(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, attempts,
                                  created_at, processed_at, dead_lettered_at)
       VALUES (gen_random_uuid(), $2, $1, 'order.updated', '{}', 0, now() - interval '500 days',
               CASE WHEN $3 = 'processed' THEN now() - interval '1 day' END,
               CASE WHEN $3 = 'dead' THEN now() - interval '400 days'
                    WHEN $3 = 'recent-dead' THEN now() - interval '1 day' END)`,
      [aggregate, aggregateType, state],
    );
  }

  async function deadLetters(): Promise<string[]> {
    const { rows } = await db.pool.query(
      `SELECT aggregate_type || ':' || aggregate_id AS a FROM outbox_events
       WHERE dead_lettered_at IS NOT NULL ORDER BY seq`,
    );
    return rows.map((r) => r.a);
  }

  async function claimOrdered(): Promise<string[]> {
    const { events } = await claimBatch(db.pool, {
      limit: 100,
      leaseMs: 60_000,
      leaseId: crypto.randomUUID(),
      maxAttempts: 10,
      ordered: true,
      deadLetterPolicy: 'block',
    });
    return events.map((e) => `${e.aggregateType}:${e.aggregateId}`).sort();
  }

  it('are kept until an operator acts; the others go, and what they held back stays held back', async () => {
    await row('a', 'dead'); // a: blocks a-2
    await row('a', 'pending');
    await row('b', 'dead'); // b: nothing behind it
    await row('c', 'dead'); // c: only finished rows behind it
    await row('c', 'processed');
    await row('d', 'pending'); // d: its dead letter comes after its pending row
    await row('d', 'dead');
    await row('e', 'dead'); // e: two dead letters in front of a pending row
    await row('e', 'dead');
    await row('e', 'pending');
    await row('f', 'dead'); // f: the pending row behind it belongs to another aggregate type
    await row('f', 'pending', 'invoice');
    await row('g', 'recent-dead'); // g: within retention, blocking or not
    await row('g', 'pending');

    const options = loadCleanupConfig({ OUTBOX_DEAD_LETTER_RETENTION_DAYS: '90' });
    const report = await runCleanup(
      { db: db.pool, options: { ...options, batchSize: 2 } },
      { remainingMs: plenty },
    );
    expect(report.deadLetters).toMatchObject({ deleted: 4, finished: true });
    expect(await deadLetters()).toEqual(['order:a', 'order:e', 'order:e', 'order:g']);

    // The relay in ordered mode (block) still holds a, e and g behind their dead letters.
    expect(await claimOrdered()).toEqual(['invoice:f', 'order:d']);

    // Running again changes nothing: the kept ones wait for an operator.
    const again = await runCleanup({ db: db.pool, options }, { remainingMs: plenty });
    expect(again.deadLetters).toMatchObject({ deleted: 0, finished: true });

    // The operator's decision: discard a's dead letter (audited), and a moves on.
    const discard = await redriveDeadLetters(db.pool, {
      action: 'discard',
      aggregateType: 'order',
      aggregateId: 'a',
      requestedBy: 'alice',
    });
    expect(discard.discarded).toBe(1);
    expect(await claimOrdered()).toEqual(['order:a']);
    const { rows } = await db.pool.query(
      `SELECT discarded_by FROM outbox_discarded_events WHERE aggregate_id = 'a'`,
    );
    expect(rows).toEqual([{ discarded_by: 'alice' }]);
  });
});

describe('idle aggregate lock rows', () => {
  it('are pruned past the outbox retention unless a producer holds them; a pruned aggregate still serializes', async () => {
    await db.pool.query('TRUNCATE outbox_aggregate_locks');
    await db.pool.query(
      `INSERT INTO outbox_aggregate_locks (aggregate_type, aggregate_id, created_at)
       SELECT 'order', 'old-' || g, now() - interval '30 days' FROM generate_series(1, 25) g
       UNION ALL SELECT 'order', 'recent', now() - interval '1 day'`,
    );
    // A producer's open transaction holds old-1.
    const producer = await db.pool.connect();
    try {
      await producer.query('BEGIN');
      await enqueueEvent(producer, {
        aggregateType: 'order',
        aggregateId: 'old-1',
        eventType: 'order.updated',
        payload: {},
      });
      const report = await runCleanup(
        { db: db.pool, options: { batchSize: 10, outboxRetentionDays: 7 } },
        { remainingMs: plenty },
      );
      expect(report.aggregateLocks).toMatchObject({ deleted: 24, statements: 3, finished: true });
      const { rows } = await db.pool.query(
        'SELECT aggregate_id FROM outbox_aggregate_locks ORDER BY aggregate_id',
      );
      expect(rows.map((r) => r.aggregate_id)).toEqual(['old-1', 'recent']);
      await producer.query('COMMIT');
    } finally {
      producer.release();
    }
    // A pruned aggregate: the next producer re-creates its row and a second one waits for it.
    const first = await db.pool.connect();
    const second = await db.pool.connect();
    try {
      await first.query('BEGIN');
      await second.query('BEGIN');
      const secondPid = (await second.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
      const event = { aggregateType: 'order', aggregateId: 'old-2', eventType: 'order.updated', payload: {} };
      await enqueueEvent(first, event);
      let secondDone = false;
      const waiting = enqueueEvent(second, event).then(() => {
        secondDone = true;
      });
      await new Promise((r) => setTimeout(r, 300));
      const { rows } = await db.pool.query('SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1', [
        secondPid,
      ]);
      expect(rows[0].wait_event_type).toBe('Lock');
      expect(secondDone).toBe(false);
      await first.query('COMMIT');
      await waiting;
      await second.query('COMMIT');
    } finally {
      first.release();
      second.release();
    }
  });
});

describe('loadCleanupConfig', () => {
  it('reads the variables, with defaults left to resolveCleanupOptions', () => {
    expect(
      loadCleanupConfig({
        OUTBOX_RETENTION_DAYS: '14',
        PROCESSED_EVENTS_RETENTION_DAYS: '45',
        OUTBOX_DEAD_LETTER_RETENTION_DAYS: '365',
        CLEANUP_BATCH_SIZE: '2000',
        CLEANUP_MAX_ROWS_PER_SECOND: '20000',
      }),
    ).toEqual({
      outboxRetentionDays: 14,
      processedEventsRetentionDays: 45,
      deadLetterRetentionDays: 365,
      batchSize: 2000,
      safetyMarginMs: undefined,
      maxRowsPerSecond: 20000,
    });
    expect(loadCleanupConfig({}).maxRowsPerSecond).toBeNull();
    expect(loadCleanupConfig({}).deadLetterRetentionDays).toBeNull();
  });

  it('a bad value names its variable', () => {
    expect(() => loadCleanupConfig({ OUTBOX_RETENTION_DAYS: 'a week' })).toThrow(
      /^OUTBOX_RETENTION_DAYS: expected an integer from 0 to 3650 \(got "a week"\)$/,
    );
    expect(() => loadCleanupConfig({ CLEANUP_BATCH_SIZE: '0' })).toThrow(/^CLEANUP_BATCH_SIZE: /);
    expect(() => loadCleanupConfig({ CLEANUP_MAX_ROWS_PER_SECOND: '0' })).toThrow(
      /^CLEANUP_MAX_ROWS_PER_SECOND: /,
    );
    expect(() => loadCleanupConfig({ OUTBOX_DEAD_LETTER_RETENTION_DAYS: '-1' })).toThrow(
      expect.objectContaining({ name: 'ConfigError', variable: 'OUTBOX_DEAD_LETTER_RETENTION_DAYS' }),
    );
  });
});
