import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { useTestDatabase } from './support/database.js';
import { lambdaContext } from './support/events.js';
import { capturePowertoolsOutput, coldStartEnv, restoreEnv } from './support/lambda.js';

const db = useTestDatabase();

afterAll(async () => {
  restoreEnv();
});
afterEach(() => {
  vi.restoreAllMocks();
});

/** Imports the handler module fresh, as a Lambda cold start would, with `env`. */
async function coldStart(env: Record<string, string>) {
  coldStartEnv({
    DATABASE_URL: db.url,
    DATABASE_SECRET_ARN: undefined,
    POWERTOOLS_METRICS_DISABLED: undefined,
    POWERTOOLS_LOG_LEVEL: 'INFO',
    POWERTOOLS_SERVICE_NAME: 'outbox-cleanup',
    POWERTOOLS_METRICS_NAMESPACE: 'Outbox',
    ...env,
  });
  return import('../functions/cleanup.js');
}

describe('functions/cleanup handler', () => {
  it('deletes by the configured retention, logs the counts and emits them as metrics', async () => {
    await db.pool.query(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, processed_at, dead_lettered_at)
       SELECT gen_random_uuid(), 'order', 'o-' || g, 'order.created', '{}',
              CASE WHEN g <= 1200 THEN now() - interval '3 days' END,
              CASE WHEN g > 1200 AND g <= 1210 THEN now() - interval '3 days' END
       FROM generate_series(1, 1300) g`,
    );
    await db.pool.query(
      `INSERT INTO processed_events (consumer, event_id, processed_at)
       SELECT 'orders', gen_random_uuid(), now() - interval '20 days' FROM generate_series(1, 700)`,
    );
    const { handler } = await coldStart({
      OUTBOX_RETENTION_DAYS: '2',
      PROCESSED_EVENTS_RETENTION_DAYS: '15',
      CLEANUP_BATCH_SIZE: '500',
    });
    const output = capturePowertoolsOutput();
    const report = await handler({}, lambdaContext(60_000, 'outbox-cleanup') as never);
    vi.restoreAllMocks();

    expect(report).toMatchObject({
      finished: true,
      outboxEvents: { deleted: 1200, statements: 3 },
      processedEvents: { deleted: 700, statements: 2 },
      deadLetters: null,
    });
    const { rows } = await db.pool.query(
      `SELECT count(*) FILTER (WHERE dead_lettered_at IS NOT NULL)::int AS dead,
              count(*) FILTER (WHERE processed_at IS NULL AND dead_lettered_at IS NULL)::int AS pending
       FROM outbox_events`,
    );
    expect(rows[0]).toEqual({ dead: 10, pending: 90 });

    expect(output.find((l) => l.message === 'cleanup finished')).toMatchObject({
      service: 'outbox-cleanup',
      function_name: 'outbox-cleanup',
      outbox_events_deleted: 1200,
      processed_events_deleted: 700,
      finished: true,
    });
    const emf = output.find((l) => l._aws !== undefined);
    expect(emf).toMatchObject({
      service: 'outbox-cleanup',
      OutboxEventsDeleted: 1200,
      ProcessedEventsDeleted: 700,
      DeadLettersDeleted: 0,
      CleanupUnfinished: 0,
    });
  });

  it('a bad variable fails the cold start with its name', async () => {
    await expect(coldStart({ PROCESSED_EVENTS_RETENTION_DAYS: '30d' })).rejects.toMatchObject({
      name: 'ConfigError',
      variable: 'PROCESSED_EVENTS_RETENTION_DAYS',
    });
  });
});
