import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SQSRecord } from 'aws-lambda';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createConsumer } from '../lib/consumer/consumer.js';
import type { EventHandler } from '../lib/consumer/handlers.js';
import { TransactionTimeoutError } from '../lib/db/guarded-client.js';
import { DatabaseUnavailableError } from '../lib/errors.js';
import type { Envelope } from '../lib/publish/envelope.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger } from './support/events.js';

const db = useTestDatabase();

let uncaught: unknown[] = [];
const recordUncaught = (error: unknown) => uncaught.push(error);
beforeEach(async () => {
  uncaught = [];
  process.on('uncaughtException', recordUncaught);
  process.on('unhandledRejection', recordUncaught);
  await db.pool.query('TRUNCATE processed_events');
});
afterEach(() => {
  process.off('uncaughtException', recordUncaught);
  process.off('unhandledRejection', recordUncaught);
});

interface Step {
  action: 'ok' | 'drop-connection' | 'wait-for-lock';
}

function envelope(action: Step['action']): Envelope<Step> {
  const aggregateId = randomUUID();
  return {
    id: randomUUID(),
    type: 'test.step',
    aggregateType: 'test',
    aggregateId,
    occurredAt: new Date().toISOString(),
    payload: { action },
    headers: {},
  };
}

function sqsRecord(body: Envelope<Step>): SQSRecord {
  const messageId = randomUUID();
  return {
    messageId,
    receiptHandle: `handle-${messageId}`,
    body: JSON.stringify(body),
    attributes: {
      ApproximateReceiveCount: '1',
      SentTimestamp: String(Date.now()),
      SenderId: 'AIDAEXAMPLE',
      ApproximateFirstReceiveTimestamp: String(Date.now()),
    },
    messageAttributes: {},
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: 'arn:aws:sqs:us-east-1:123456789012:steps',
    awsRegion: 'us-east-1',
  };
}

async function dedupeRows(): Promise<string[]> {
  const { rows } = await db.pool.query<{ event_id: string }>('SELECT event_id FROM processed_events');
  return rows.map((r) => r.event_id).sort();
}

async function terminateApplication(applicationName: string): Promise<number> {
  const { rows } = await db.pool.query<{ pid: number }>(
    'SELECT pg_terminate_backend(pid) AS ok, pid FROM pg_stat_activity WHERE application_name = $1',
    [applicationName],
  );
  return rows.length;
}

const step: EventHandler<Step> = async (event, tx) => {
  if (event.payload.action === 'drop-connection') {
    const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    await db.pool.query('SELECT pg_terminate_backend($1)', [rows[0]?.pid]);
    await sleep(300); // awaiting something else while the connection dies
    await tx.query('SELECT 1');
  } else if (event.payload.action === 'wait-for-lock') {
    await tx.query('SELECT id FROM budget_lock WHERE id = 1 FOR UPDATE');
  }
};

describe('consumer: dropped connections', () => {
  it('a connection dropped mid-record fails that record only; idle ones dropped between batches do no harm', async () => {
    // A pool as a user might wire it: no `error` listener.
    const pool = new pg.Pool({ connectionString: db.url, max: 1, application_name: 'consumer-drop' });
    const log = captureLogger();
    const consumer = createConsumer({
      name: 'drop',
      pool,
      handlers: { 'test.step': step },
      logger: log.logger,
    });
    const events = [envelope('ok'), envelope('drop-connection'), envelope('ok')];
    const result = await consumer.handleSqsEvent({ Records: events.map(sqsRecord) });

    expect(uncaught).toEqual([]);
    expect(result.outcomes.map((o) => o.status)).toEqual(['processed', 'failed', 'processed']);
    expect(result.outcomes[1]?.error).toBeInstanceOf(DatabaseUnavailableError);
    expect(await dedupeRows()).toEqual([events[0]?.id, events[2]?.id].sort());

    // Between invocations the pool's idle connection is terminated (RDS Proxy,
    // a failover): the next batch gets a new one.
    expect(await terminateApplication('consumer-drop')).toBe(1);
    await sleep(300);
    const next = await consumer.handleSqsEvent({ Records: [sqsRecord(envelope('ok'))] });
    expect(uncaught).toEqual([]);
    expect(next.processed).toBe(1);
    expect(log.lines.map((l) => l.message)).toContain(
      'idle database connection lost; the pool will open a new one',
    );
    await pool.end();
  });
});

describe('consumer: time budget', () => {
  it('cuts off a record stuck on a lock within the time left, reports it, and gives back the rest', async () => {
    await db.pool.query('CREATE TABLE IF NOT EXISTS budget_lock (id int PRIMARY KEY)');
    await db.pool.query('INSERT INTO budget_lock VALUES (1) ON CONFLICT DO NOTHING');
    const holder = await db.pool.connect();
    await holder.query('BEGIN');
    await holder.query('SELECT id FROM budget_lock WHERE id = 1 FOR UPDATE');
    try {
      const log = captureLogger();
      const consumer = createConsumer({
        name: 'budget',
        pool: db.pool,
        handlers: { 'test.step': step },
        logger: log.logger,
        safetyMarginMs: 1000,
      });
      const events = [envelope('ok'), envelope('wait-for-lock'), envelope('ok'), envelope('ok')];
      const records = events.map(sqsRecord);
      // A 3 s invocation: the stuck record may run until 1 s before its end.
      const started = Date.now();
      const end = started + 3000;
      const result = await consumer.handleSqsEvent(
        { Records: records },
        { remainingMs: () => end - Date.now() },
      );
      const took = Date.now() - started;

      expect(took).toBeGreaterThanOrEqual(1900);
      expect(took).toBeLessThan(2600); // returned before the end, margin to spare
      expect(result.outcomes.map((o) => o.status)).toEqual(['processed', 'failed', 'deferred', 'deferred']);
      expect(result.outcomes[1]?.error).toBeInstanceOf(TransactionTimeoutError);
      expect(result.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(
        records.slice(1).map((r) => r.messageId),
      );
      // The cut-off record left no dedupe row: its retry runs the handler again.
      expect(await dedupeRows()).toEqual([events[0]?.id]);
      expect(log.lines.filter((l) => l.message.startsWith('record cut off'))).toHaveLength(1);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
  });

  it('without remainingMs nothing is cut off, and the connection keeps its own statement_timeout', async () => {
    const consumer = createConsumer({ name: 'unbounded', pool: db.pool, handlers: { 'test.step': step } });
    const result = await consumer.handleSqsEvent({ Records: [sqsRecord(envelope('ok'))] });
    expect(result.processed).toBe(1);
    expect((await db.pool.query('SHOW statement_timeout')).rows).toEqual([{ statement_timeout: '0' }]);
  });
});
