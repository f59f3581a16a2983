import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { listenSignal } from '../lib/relay/notifier.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger } from './support/events.js';

const db = useTestDatabase();

let uncaught: unknown[] = [];
const record = (error: unknown) => uncaught.push(error);
beforeEach(() => {
  uncaught = [];
  process.on('uncaughtException', record);
  process.on('unhandledRejection', record);
});
afterEach(() => {
  process.off('uncaughtException', record);
  process.off('unhandledRejection', record);
});

/** How long `wait(2000)` takes when a NOTIFY is sent 100 ms in. */
async function wakeTime(signal: { wait(ms: number): Promise<void> }): Promise<number> {
  const started = Date.now();
  const waiting = signal.wait(2000);
  await sleep(100);
  await db.pool.query(`SELECT pg_notify('outbox_events', '')`);
  await waiting;
  return Date.now() - started;
}

describe('listenSignal', () => {
  it('survives its connection being terminated, falls back to the timer, then LISTENs again', async () => {
    const log = captureLogger();
    const signal = await listenSignal(
      { connectionString: db.url, application_name: 'listen-test' },
      { logger: log.logger, reconnectDelayMs: 200 },
    );
    try {
      expect(await wakeTime(signal)).toBeLessThan(1000);

      await db.pool.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'listen-test'`,
      );
      await sleep(100);
      expect(uncaught).toEqual([]);
      expect(log.lines.map((l) => l.message)).toContain(
        'LISTEN connection lost; waiting falls back to the timer',
      );

      // The timer still ends a wait; a later wait LISTENs again.
      const started = Date.now();
      await signal.wait(300);
      expect(Date.now() - started).toBeGreaterThanOrEqual(290);
      await sleep(200);
      await signal.wait(10);
      await sleep(200);
      expect(log.lines.map((l) => l.message)).toContain('LISTEN connection restored');
      expect(await wakeTime(signal)).toBeLessThan(1000);
      expect(uncaught).toEqual([]);
    } finally {
      await signal.close();
    }
  });
});
