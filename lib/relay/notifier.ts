import pg from 'pg';

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

/**
 * LISTENs on `outbox_events` (fed by the optional statement-level trigger) on a
 * dedicated connection, so an idle relay picks up a committed event within
 * milliseconds instead of at its next poll. If the connection drops, waiting
 * falls back to the timer; nothing depends on a notification arriving.
 */
export async function listenSignal(config: pg.ClientConfig): Promise<WorkSignal> {
  const client = new pg.Client(config);
  let waiters: Array<() => void> = [];
  const wakeAll = () => {
    const current = waiters;
    waiters = [];
    for (const wake of current) wake();
  };
  client.on('notification', wakeAll);
  client.on('error', () => {}); // a lost listener only costs latency
  await client.connect();
  await client.query('LISTEN outbox_events');
  return {
    wait: (ms) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(done, ms);
        function done() {
          clearTimeout(timer);
          waiters = waiters.filter((w) => w !== done);
          resolve();
        }
        waiters.push(done);
      }),
    close: async () => {
      wakeAll();
      await client.end().catch(() => {});
    },
  };
}
