import { beforeEach, describe, expect, it } from 'vitest';
import { runCleanup } from '../lib/operations/cleanup.js';
import { loadCleanupConfig } from '../lib/operations/cleanup-config.js';
import { enqueueEvent } from '../lib/outbox/enqueue.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger, captureMetrics } from './support/events.js';

const db = useTestDatabase();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, processed_events');
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

  it('stops before a batch when the time left is under the safety margin; the next run finishes', async () => {
    await outboxRows(12_000, { processedDaysAgo: 10 });
    await dedupeRows(3_000, 40);
    // Plenty of time for three batches, then the budget is nearly spent.
    let checks = 0;
    const remainingMs = () => (++checks <= 3 ? 60_000 : 4_000);
    const log = captureLogger();
    const metrics = captureMetrics();

    const report = await runCleanup(
      {
        db: db.pool,
        options: { batchSize: 1000, safetyMarginMs: 5_000 },
        logger: log.logger,
        metrics: metrics.metrics,
      },
      { remainingMs },
    );
    expect(report).toMatchObject({
      finished: false,
      stoppedBecause: 'time',
      outboxEvents: { deleted: 3000, statements: 3, finished: false },
      processedEvents: { deleted: 0, statements: 0, finished: false },
    });
    expect(await census()).toMatchObject({ old_processed: 9000, old_dedupe: 3000 });
    expect(log.lines.find((l) => l.level === 'warn')?.message).toMatch(/stopped early/);
    expect(metrics.records).toContainEqual({
      name: 'CleanupUnfinished',
      unit: 'Count',
      value: 1,
      dimensions: undefined,
    });

    const rest = await runCleanup(
      { db: db.pool, options: { batchSize: 1000, safetyMarginMs: 5_000 } },
      { remainingMs: plenty },
    );
    expect(rest).toMatchObject({
      finished: true,
      outboxEvents: { deleted: 9000, statements: 10 },
      processedEvents: { deleted: 3000, statements: 4 },
    });
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

  it('dead letters are deleted only when a retention is configured, by dead_lettered_at against a pinned now', async () => {
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
    const { rows } = await db.pool.query('SELECT aggregate_id FROM outbox_events ORDER BY aggregate_id');
    expect(rows.map((r) => r.aggregate_id)).toEqual(['c', 'd']);
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
