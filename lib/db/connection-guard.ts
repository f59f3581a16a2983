import type { EventEmitter } from 'node:events';
import { DatabaseUnavailableError } from '../errors.js';
import { type OutboxLogger, silentLogger } from '../observer.js';

/**
 * The connection a statement ran on was lost (terminated by the server, a
 * failover, RDS Proxy closing it, a network drop). Only this connection is
 * known to be gone: a fresh one from the pool may well work, unlike the
 * plain {@link DatabaseUnavailableError} raised when none can be had.
 */
export class ConnectionLostError extends DatabaseUnavailableError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, options);
    this.name = 'ConnectionLostError';
  }
}

// SQLSTATE codes after which the session is gone: class 08 (connection
// exception), the server shutting the backend down (57P01 admin shutdown, e.g.
// pg_terminate_backend; 57P02 crash; 57P03 cannot connect now), and the idle
// timeouts that end the session (25P03, 57P05).
const LOST_SQLSTATES = new Set(['57P01', '57P02', '57P03', '57P05', '25P03']);
// Socket-level failures as Node reports them.
const LOST_SOCKET_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
// node-postgres raises these as plain Errors without a code.
const LOST_MESSAGES = [
  'Connection terminated',
  'Client has encountered a connection error and is not queryable',
  'Client was closed and is not queryable',
];

/** True when `error` means the connection itself is gone, not that a statement failed. */
export function isConnectionLost(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (code.startsWith('08') || LOST_SQLSTATES.has(code) || LOST_SOCKET_CODES.has(code)) return true;
  }
  return LOST_MESSAGES.some((m) => error.message.startsWith(m));
}

type ErrorEmitter = Pick<EventEmitter, 'on' | 'listenerCount'>;

function isErrorEmitter(value: unknown): value is ErrorEmitter {
  const candidate = value as Partial<ErrorEmitter> | null;
  return typeof candidate?.on === 'function' && typeof candidate.listenerCount === 'function';
}

/**
 * Makes sure a dropped idle connection cannot crash the process. A `pg.Pool`
 * re-emits the `error` of an idle client (the server terminated it, a
 * failover, a network drop) after removing it from the pool; with no listener
 * Node turns that into an uncaught exception, which kills a Lambda runtime
 * and retries its whole batch. When `db` has no `error` listener yet, one is
 * added that logs a warning; a listener the caller attached is left alone.
 * Works on a `pg.Client` too; anything else is returned unchanged.
 *
 * @example
 * const pool = guardPool(new pg.Pool(config), logger);
 */
export function guardPool<T>(db: T, logger: OutboxLogger = silentLogger): T {
  if (isErrorEmitter(db) && db.listenerCount('error') === 0) {
    db.on('error', (error: Error) => {
      logger.warn('idle database connection lost; the pool will open a new one', {
        error: String(error),
        code: (error as { code?: unknown }).code,
      });
    });
  }
  return db;
}

/** The `error` listener of one checked-out client; see {@link watchClient}. */
export interface ClientWatch {
  /** The error that ended the connection, once it happened. */
  readonly lost: Error | undefined;
  /**
   * Stops watching a healthy client before it goes back to the pool (the
   * pool's own listener takes over). A lost client keeps the listener: it may
   * still emit as it closes, and it is destroyed rather than reused.
   */
  stop(): void;
}

/**
 * Listens for `error` on a client checked out of a pool. The pool removes its
 * own listener while the client is out, so a connection that drops while its
 * holder awaits something else (an HTTP call, a timer) emits `error` with no
 * listener and crashes the process. The watch records the error instead, so
 * the holder's next statement fails and the client can be destroyed.
 *
 * @example
 * const client = await pool.connect();
 * const watch = watchClient(client, logger);
 * try { ... } finally { watch.stop(); client.release(watch.lost); }
 */
export function watchClient(client: EventEmitter, logger: OutboxLogger = silentLogger): ClientWatch {
  let lost: Error | undefined;
  const onError = (error: Error) => {
    if (lost) return; // the same loss reported again as the socket closes
    lost = error;
    logger.warn('database connection lost while in use', {
      error: String(error),
      code: (error as { code?: unknown }).code,
    });
  };
  client.on('error', onError);
  return {
    get lost() {
      return lost;
    },
    stop() {
      if (!lost) client.removeListener('error', onError);
    },
  };
}

/**
 * `error` as the caller should see it: a lost connection becomes a
 * {@link ConnectionLostError} (a {@link DatabaseUnavailableError}) with the
 * original as `cause`; anything else is returned unchanged.
 */
export function translateConnectionError(error: unknown, watch?: ClientWatch): unknown {
  if (error instanceof DatabaseUnavailableError) return error;
  if (!isConnectionLost(error) && !watch?.lost) return error;
  const reason = watch?.lost ?? (error as Error);
  return new ConnectionLostError(`database connection lost: ${reason.message}`, { cause: error });
}
