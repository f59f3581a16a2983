import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConnectionLostError, guardPool } from '../lib/db/connection-guard.js';
import { TransactionTimeoutError } from '../lib/db/guarded-client.js';
import { withTransaction } from '../lib/db/transaction.js';
import { DatabaseUnavailableError } from '../lib/errors.js';
import { NullPublisher } from '../lib/publish/null-publisher.js';
import type { Publisher } from '../lib/publish/types.js';
import { Relay } from '../lib/relay/relay.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger, eventRows, insertEvents } from './support/events.js';

const db = useTestDatabase();

// What reached the process unhandled. vitest would report it too, but after
// the test; recording it here makes the test itself fail.
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

/** A pool as a user might build it: no `error` listener. */
function barePool(applicationName: string, options: pg.PoolConfig = {}): pg.Pool {
  return new pg.Pool({ connectionString: db.url, max: 2, application_name: applicationName, ...options });
}

async function terminate(pid: number): Promise<void> {
  await db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
}

async function terminateApplication(applicationName: string): Promise<number> {
  const { rows } = await db.pool.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`,
    [applicationName],
  );
  for (const { pid } of rows) await terminate(pid);
  return rows.length;
}

async function backendPid(client: pg.ClientBase): Promise<number> {
  const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return rows[0]?.pid as number;
}

describe('withTransaction: a dropped connection', () => {
  it('while the callback awaits a timer: no uncaught exception, the next statement fails, the pool recovers', async () => {
    const pool = barePool('tx-timer');
    const log = captureLogger();
    let pid = 0;
    let nextQuery: unknown;
    const error = await withTransaction(
      pool,
      async (tx) => {
        pid = await backendPid(tx);
        await terminate(pid);
        await sleep(300); // non-database work; the connection dies meanwhile
        try {
          await tx.query('SELECT 1');
        } catch (caught) {
          nextQuery = caught;
          throw caught;
        }
      },
      { logger: log.logger },
    ).catch((caught: unknown) => caught);

    expect(uncaught).toEqual([]);
    expect(nextQuery).toBeInstanceOf(DatabaseUnavailableError);
    expect(nextQuery).toBeInstanceOf(ConnectionLostError);
    expect(error).toBe(nextQuery);
    expect(log.lines.some((l) => l.message === 'database connection lost while in use')).toBe(true);

    // The broken client was destroyed, not handed out again.
    const again = await withTransaction(pool, (tx) => backendPid(tx));
    expect(again).not.toBe(pid);
    expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    await pool.end();
  });

  it('during a statement: the statement fails with DatabaseUnavailableError, nothing uncaught', async () => {
    const pool = barePool('tx-active');
    let statement: unknown;
    const error = await withTransaction(pool, async (tx) => {
      const pid = await backendPid(tx);
      const running = tx.query('SELECT pg_sleep(5)').then(
        () => undefined,
        (caught: unknown) => caught,
      );
      await sleep(100);
      await terminate(pid);
      statement = await running;
      throw statement;
    }).catch((caught: unknown) => caught);
    await sleep(100);
    expect(uncaught).toEqual([]);
    expect(statement).toBeInstanceOf(DatabaseUnavailableError);
    expect(error).toBe(statement);
    expect(await withTransaction(pool, async (tx) => (await tx.query('SELECT 2 AS two')).rows)).toEqual([
      { two: 2 },
    ]);
    await pool.end();
  });

  it('with a callback that ignores the loss: COMMIT fails with DatabaseUnavailableError', async () => {
    const pool = barePool('tx-commit');
    const error = await withTransaction(pool, async (tx) => {
      await terminate(await backendPid(tx));
      await sleep(300);
    }).catch((caught: unknown) => caught);
    expect(uncaught).toEqual([]);
    expect(error).toBeInstanceOf(DatabaseUnavailableError);
    await pool.end();
  });

  it('keeps its own errors as they were', async () => {
    const pool = barePool('tx-own-error');
    const own = new Error('the handler said no');
    await expect(
      withTransaction(pool, async () => {
        throw own;
      }),
    ).rejects.toBe(own);
    const sqlError = await withTransaction(pool, (tx) => tx.query('SELECT * FROM no_such_table')).catch(
      (caught: unknown) => caught,
    );
    expect(sqlError).not.toBeInstanceOf(DatabaseUnavailableError);
    expect((sqlError as { code?: string }).code).toBe('42P01');
    await pool.end();
  });
});

describe('guardPool', () => {
  it('an idle connection of a bare pool dropped: logged, not thrown; the pool opens a new one', async () => {
    const pool = barePool('guarded-idle');
    const log = captureLogger();
    expect(guardPool(pool, log.logger)).toBe(pool);
    await pool.query('SELECT 1');
    expect(await terminateApplication('guarded-idle')).toBe(1);
    await sleep(300);
    expect(uncaught).toEqual([]);
    expect(log.lines.map((l) => l.message)).toContain(
      'idle database connection lost; the pool will open a new one',
    );
    expect((await pool.query('SELECT 3 AS three')).rows).toEqual([{ three: 3 }]);
    await pool.end();
  });

  it("leaves a listener of the caller's alone", async () => {
    const pool = barePool('guarded-own');
    const seen: Error[] = [];
    pool.on('error', (error) => seen.push(error));
    const log = captureLogger();
    guardPool(pool, log.logger);
    expect(pool.listenerCount('error')).toBe(1);
    await pool.query('SELECT 1');
    await terminateApplication('guarded-own');
    await sleep(300);
    expect(seen).toHaveLength(1);
    expect(log.lines).toEqual([]);
    await pool.end();
  });
});

describe('withTransaction: deadline', () => {
  it('cuts off a statement at the deadline, not at the session timeout', async () => {
    const pool = barePool('tx-deadline');
    const started = Date.now();
    const error = await withTransaction(pool, (tx) => tx.query('SELECT pg_sleep(10)'), {
      deadline: Date.now() + 500,
    }).catch((caught: unknown) => caught);
    const took = Date.now() - started;
    expect(error).toBeInstanceOf(TransactionTimeoutError);
    expect(took).toBeGreaterThanOrEqual(450);
    expect(took).toBeLessThan(1500);
    await pool.end();
  });

  it('lowers the timeout for a statement that starts late, and refuses one after the deadline', async () => {
    const pool = barePool('tx-deadline-late', { max: 1 });
    const started = Date.now();
    let late: unknown;
    const error = await withTransaction(
      pool,
      async (tx) => {
        await tx.query('SELECT 1');
        await sleep(800); // not a statement: only the next statement can be bounded
        await tx.query('SELECT pg_sleep(10)');
      },
      { deadline: Date.now() + 1000, deadlineSlackMs: 100 },
    ).catch((caught: unknown) => caught);
    const took = Date.now() - started;
    expect(error).toBeInstanceOf(TransactionTimeoutError);
    // Without lowering, pg_sleep would get the full second it had at BEGIN
    // and end at 1.8 s.
    expect(took).toBeGreaterThanOrEqual(950);
    expect(took).toBeLessThan(1500);

    await withTransaction(
      pool,
      async (tx) => {
        await sleep(250);
        late = await tx.query('SELECT 1').catch((caught: unknown) => caught);
      },
      { deadline: Date.now() + 100 },
    ).catch(() => {});
    expect(late).toBeInstanceOf(TransactionTimeoutError);

    // SET LOCAL ended with the transaction: the pooled connection is as it was.
    expect((await pool.query('SHOW statement_timeout')).rows).toEqual([{ statement_timeout: '0' }]);
    await pool.end();
  });

  it("never raises the session's statement_timeout", async () => {
    const pool = barePool('tx-deadline-session', { statement_timeout: 300 });
    const started = Date.now();
    const error = await withTransaction(pool, (tx) => tx.query('SELECT pg_sleep(5)'), {
      deadline: Date.now() + 10_000,
    }).catch((caught: unknown) => caught);
    expect(Date.now() - started).toBeLessThan(2000);
    // The session's own timeout, not the deadline: reported as PostgreSQL said it.
    expect(error).not.toBeInstanceOf(TransactionTimeoutError);
    expect((error as { code?: string }).code).toBe('57014');
    await pool.end();
  });
});

describe('Relay: a bare pg.Pool', () => {
  it('keeps running when its idle connections are terminated mid-run', async () => {
    const pool = barePool('relay-idle', { max: 3 });
    await insertEvents(db.pool, 30);
    const sink = new NullPublisher();
    let terminated = 0;
    // While the batch is being published no statement runs: every connection
    // of the relay's pool is idle, and each is terminated.
    const publisher: Publisher = {
      async publish(events) {
        terminated += await terminateApplication('relay-idle');
        await sleep(200);
        return sink.publish(events);
      },
    };
    const log = captureLogger();
    const relay = new Relay({
      db: pool,
      publisher,
      options: { safetyMarginMs: 0, workers: 1, batchSize: 10 },
      logger: log.logger,
    });
    const summary = await relay.run({ remainingMs: () => 60_000, stopWhenIdle: true, skipStats: true });
    expect(uncaught).toEqual([]);
    expect(terminated).toBeGreaterThanOrEqual(3);
    expect(summary.published).toBe(30);
    expect((await eventRows(db.pool)).every((row) => row.processed_at !== null)).toBe(true);
    expect(log.lines.filter((l) => l.message.startsWith('idle database connection lost'))).not.toEqual([]);
    await pool.end();
  });
});
