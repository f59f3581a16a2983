import type pg from 'pg';
import { enqueueEvents } from '../../lib/outbox/enqueue.js';
import type { NewOutboxEvent } from '../../lib/outbox/types.js';

/** Inserts `count` events, in chunks, returning their ids in order. */
export async function insertEvents(
  pool: pg.Pool,
  count: number,
  make: (i: number) => Partial<NewOutboxEvent> = () => ({}),
): Promise<string[]> {
  const ids: string[] = [];
  for (let start = 0; start < count; start += 1000) {
    const chunk = Array.from({ length: Math.min(1000, count - start) }, (_, k) => {
      const i = start + k;
      return {
        aggregateType: 'order',
        aggregateId: `order-${i}`,
        eventType: 'order.created',
        payload: { i },
        ...make(i),
      };
    });
    ids.push(...(await enqueueEvents(pool, chunk)));
  }
  return ids;
}

export interface EventRow {
  id: string;
  seq: string;
  attempts: number;
  retry_after: Date | null;
  locked_until: Date | null;
  locked_by: string | null;
  last_error: string | null;
  processed_at: Date | null;
  dead_lettered_at: Date | null;
  delivered_targets: string[];
}

export async function eventRows(pool: pg.Pool): Promise<EventRow[]> {
  const { rows } = await pool.query<EventRow>(
    `SELECT id, seq, attempts, retry_after, locked_until, locked_by, last_error, processed_at,
            dead_lettered_at, delivered_targets
     FROM outbox_events ORDER BY seq`,
  );
  return rows;
}

/** A Lambda context with a fixed time budget, as the scheduler would give. */
export function lambdaContext(budgetMs: number, name = 'outbox-relay') {
  const deadline = Date.now() + budgetMs;
  return {
    callbackWaitsForEmptyEventLoop: false,
    functionName: name,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:us-east-1:000000000000:function:${name}`,
    memoryLimitInMB: '512',
    awsRequestId: `req-${Math.random().toString(16).slice(2)}`,
    logGroupName: `/aws/lambda/${name}`,
    logStreamName: 'local',
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => {},
    fail: () => {},
    succeed: () => {},
  };
}

/** Captures log lines for assertions. */
export function captureLogger() {
  const lines: Array<{ level: string; message: string; extra: Record<string, unknown> }> = [];
  const at =
    (level: string) =>
    (message: string, ...extra: Array<Record<string, unknown>>) =>
      lines.push({ level, message, extra: Object.assign({}, ...extra) });
  return { lines, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}

/** Captures metrics for assertions. */
export function captureMetrics() {
  const records: Array<{ name: string; unit: string; value: number; dimensions?: Record<string, string> }> =
    [];
  return {
    records,
    metrics: {
      record: (name: string, unit: string, value: number, dimensions?: Record<string, string>) =>
        records.push({ name, unit, value, dimensions }),
    },
  };
}
