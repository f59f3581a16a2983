import pg from 'pg';
import { type OutboxLogger, silentLogger } from '../observer.js';

/** Wakes idle relay loops early. */
export interface WorkSignal {
  /** Resolves after `ms`, or sooner when new work may have arrived. */
  wait(ms: number): Promise<void>;
  close(): Promise<void>;
}

/** Plain timer: the right choice behind RDS Proxy, where LISTEN pins the connection. */
export const sleepSignal: WorkSignal = {
  wait: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  close: async () => {},
};

export interface ListenOptions {
  /** Where a lost or restored LISTEN connection is reported. */
  logger?: OutboxLogger | undefined;
  /** Least time between two attempts to LISTEN again after the connection was lost. Default 5000. */
  reconnectDelayMs?: number | undefined;
}

/**
 * LISTENs on `outbox_events` (fed by the optional statement-level trigger) on a
 * dedicated connection, so an idle relay picks up a committed event within
 * milliseconds instead of at its next poll. If the connection drops (it has
 * its own `error` listener: never an uncaught exception), waiting falls back
 * to the timer and a later `wait` LISTENs again on a new connection, at most
 * once per `reconnectDelayMs`; nothing depends on a notification arriving.
 *
 * @example
 * const workSignal = await listenSignal(dbConfig, { logger });
 * const relay = new Relay({ db: pool, publisher, workSignal });
 */
export async function listenSignal(
  config: pg.ClientConfig,
  options: ListenOptions = {},
): Promise<WorkSignal> {
  const logger = options.logger ?? silentLogger;
  const reconnectDelayMs = options.reconnectDelayMs ?? 5_000;
  let waiters: Array<() => void> = [];
  const wakeAll = () => {
    const current = waiters;
    waiters = [];
    for (const wake of current) wake();
  };
  let client: pg.Client | undefined;
  let connecting: Promise<void> | undefined;
  let lastAttempt = 0;
  let closed = false;

  async function listen(): Promise<void> {
    lastAttempt = Date.now();
    const next = new pg.Client(config);
    let lost = false;
    const drop = (error?: Error) => {
      if (lost) return;
      lost = true;
      if (client === next) client = undefined;
      if (!closed) {
        logger.warn('LISTEN connection lost; waiting falls back to the timer', { error: String(error) });
      }
      next.end().catch(() => {});
    };
    next.on('notification', wakeAll);
    next.on('error', drop);
    next.on('end', () => drop(new Error('connection ended')));
    await next.connect();
    await next.query('LISTEN outbox_events');
    if (closed || lost) {
      await next.end().catch(() => {});
      return;
    }
    client = next;
  }

  function relisten() {
    if (closed || client || connecting || Date.now() - lastAttempt < reconnectDelayMs) return;
    connecting = listen()
      .then(() => {
        if (client) logger.info('LISTEN connection restored');
      })
      .catch((error: unknown) => logger.warn('could not LISTEN again; will retry', { error: String(error) }))
      .finally(() => {
        connecting = undefined;
      });
  }

  await listen();
  return {
    wait: (ms) =>
      new Promise<void>((resolve) => {
        relisten();
        const timer = setTimeout(done, ms);
        function done() {
          clearTimeout(timer);
          waiters = waiters.filter((w) => w !== done);
          resolve();
        }
        waiters.push(done);
      }),
    close: async () => {
      closed = true;
      wakeAll();
      await connecting;
      await client?.end().catch(() => {});
      client = undefined;
    },
  };
}
