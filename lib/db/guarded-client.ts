import type { PoolClient } from 'pg';
import { OutboxError } from '../errors.js';
import { type ClientWatch, translateConnectionError } from './connection-guard.js';

/**
 * The transaction ran out of the time it was given (`deadline` of
 * `withTransaction`): a statement was cancelled by its `statement_timeout`, or
 * was not sent because the deadline had passed. The transaction is rolled
 * back; retrying later, with more time, may succeed.
 */
export class TransactionTimeoutError extends OutboxError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { ...options, retryable: true });
    this.name = 'TransactionTimeoutError';
  }
}

// Why it is shaped this way:
// - set_config(..., true) is SET LOCAL with a parameter: it ends with the
//   transaction, so the pooled connection (or RDS Proxy's shared one) keeps
//   its own setting and the proxy does not pin the session.
// - It never raises the timeout: the session's statement_timeout (30 s from
//   lib/db/connection-config.ts) stays in force when the time left is
//   longer. current_setting() gives it with a unit ('30s', '0'), which casts
//   to an interval; 0 means no timeout.
// - It returns the timeout it applied, so the caller knows when to lower it.
const SET_STATEMENT_TIMEOUT_SQL = `
WITH current AS (
  SELECT (extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)::bigint AS ms
), applied AS (
  SELECT CASE WHEN ms > 0 AND ms < $1::bigint THEN ms ELSE $1::bigint END AS ms FROM current
)
SELECT set_config('statement_timeout', ms::text, true), ms AS applied_ms
FROM applied`;

/** A deadline for every statement of one transaction; see {@link guardClient}. */
export interface StatementDeadline {
  /** Epoch milliseconds (as `now()` counts) by which every statement must have finished. */
  at: number;
  now: () => number;
  /**
   * How far the applied `statement_timeout` may exceed the time left before it
   * is lowered again (one extra round trip). Bounds how long past `at` a
   * statement started late can run.
   */
  slackMs: number;
}

function timedOut(cause?: unknown): TransactionTimeoutError {
  return new TransactionTimeoutError(
    cause
      ? 'statement cancelled: the time given to the transaction ran out'
      : 'statement not sent: the time given to the transaction ran out',
    { cause },
  );
}

/** Lowers `statement_timeout` (transaction-local) to `ms`; returns what was applied. */
export async function setStatementTimeout(client: PoolClient, ms: number): Promise<number> {
  const { rows } = await client.query<{ applied_ms: string }>(SET_STATEMENT_TIMEOUT_SQL, [
    Math.max(1, Math.floor(ms)),
  ]);
  return Number(rows[0]?.applied_ms);
}

/**
 * The client handed to a transaction's callback: the same client, except that
 * a statement on a lost connection rejects with `ConnectionLostError` (a
 * `DatabaseUnavailableError`), and with a deadline no statement runs past it
 * (by more than `slackMs`): `statement_timeout` is lowered to the time left
 * before a statement whenever it exceeds that by more than `slackMs`, and a
 * statement is not sent once the deadline has passed.
 *
 * Only promise-style `query(...)` calls get this; a callback or a submittable
 * (cursor, stream) is passed through with just the deadline check.
 */
export function guardClient(
  client: PoolClient,
  watch: ClientWatch,
  deadline?: StatementDeadline & { appliedMs: number },
): PoolClient {
  // A lowered timeout must reach the server before the statement it bounds,
  // and statements must keep the order they were issued in: once a
  // set_config is queued, later statements chain behind it (pg would queue
  // them itself, but warns that this is deprecated).
  let chain: Promise<unknown> | undefined;
  const translate = (error: unknown) => {
    // 57014 is any cancellation; it is ours when it came at the deadline (an
    // earlier one is the session's own, shorter statement_timeout).
    if (
      deadline &&
      (error as { code?: unknown }).code === '57014' &&
      deadline.now() >= deadline.at - deadline.slackMs
    ) {
      throw timedOut(error);
    }
    throw translateConnectionError(error, watch);
  };

  function query(this: unknown, ...args: unknown[]): unknown {
    const passThrough =
      typeof args[args.length - 1] === 'function' ||
      typeof (args[0] as { submit?: unknown } | null)?.submit === 'function';
    if (deadline) {
      const left = deadline.at - deadline.now();
      if (left <= 0) {
        const error = timedOut();
        if (passThrough) throw error;
        return Promise.reject(error);
      }
      if (!passThrough && deadline.appliedMs - left > deadline.slackMs) {
        deadline.appliedMs = left;
        const lower = () =>
          setStatementTimeout(client, left).then(
            (applied) => {
              if (deadline) deadline.appliedMs = applied;
            },
            () => {}, // the statement behind it fails the same way and reports it
          );
        chain = chain ? chain.then(lower) : lower();
      }
    }
    const run = () => (client.query as (...a: unknown[]) => unknown)(...args);
    if (passThrough) return run();
    if (!chain) return (run() as Promise<unknown>).catch(translate);
    const result = chain.then(() => run() as Promise<unknown>).catch(translate);
    const settled = result.then(
      () => {},
      () => {},
    );
    chain = settled;
    void settled.then(() => {
      if (chain === settled) chain = undefined;
    });
    return result;
  }

  return new Proxy(client, {
    get(target, property) {
      if (property === 'query') return query;
      const value = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
