import type { Queryable } from '../db/queryable.js';
import { ConfigError } from '../errors.js';
import { type OutboxLogger, silentLogger } from '../observer.js';
import { optionalImportOnce } from '../optional-dependency.js';
import { WAKE_SOURCE } from '../relay/invocation.js';
import { anyRelaySlotHeld } from '../sql/relay-slots.js';

/** The Lambda client's classes, loaded at the first wake. */
const loadLambda = optionalImportOnce(
  '@aws-sdk/client-lambda',
  'createRelayWaker',
  () => import('@aws-sdk/client-lambda'),
);

/**
 * What the waker needs of a Lambda client: its `send`. Written out so that
 * this entry point's declarations name no AWS SDK type; an `@aws-sdk/client-lambda`
 * `LambdaClient` is one.
 */
export interface LambdaSender {
  send(command: object, options?: { abortSignal?: AbortSignal | undefined }): Promise<unknown>;
}

export interface RelayWakerOptions {
  /** The relay function's name or ARN (the reference stack: `<service>-<stage>-relay`). */
  functionName: string;
  /** Default: a LambdaClient of `@aws-sdk/client-lambda` (an optional peer), built at the first wake. */
  lambda?: LambdaSender;
  /**
   * Wakes closer together than this invoke nothing: the relay woken by the
   * earlier one is still running, kept alive by the events it found (its
   * idle tail restarts with every claim that finds work). Keep it under the
   * relay's idle tail (`OUTBOX_IDLE_TAIL_MS`, 1 s in the reference stack)
   * less a poll (0.5 s). Default 500 ms.
   */
  keepAliveMs?: number;
  /**
   * The outbox's database (your pool, or the client of the transaction that
   * just committed). Given, each wake first looks whether a relay holds a
   * slot of `outbox_relay_slots` (relays with `OUTBOX_MAX_RELAYS`, as the
   * reference stack deploys them): if one does, it invokes nothing, since
   * that relay takes the event, or looks for it as it leaves. With it the
   * per-process debounce (`keepAliveMs`) is not used: many producer
   * processes then start one relay between them instead of one each. A
   * failed look wakes the relay anyway.
   */
  db?: Queryable;
  /** The schema of the outbox tables, as given to `migrate({ schema })`. */
  schema?: string;
  /** Longest wait for the Invoke call. Default 2,000 ms. */
  timeoutMs?: number;
  logger?: OutboxLogger;
  /** Clock (tests). */
  now?: () => number;
}

/**
 * What a wake did: `invoked` (the relay was started), `relay-running` (a
 * relay held a slot and takes the events; with `db`), `debounced` (a wake
 * less than `keepAliveMs` ago started one; without `db`), `failed` (the
 * Invoke failed and was logged; the schedule publishes the events).
 */
export type WakeOutcome = 'invoked' | 'relay-running' | 'debounced' | 'failed';

export interface RelayWaker {
  /**
   * Call right after a transaction that enqueued events has committed. Starts
   * a relay invocation (`InvocationType: 'Event'`, asynchronous) unless a
   * relay holds a slot (with `db`), or else unless one was started, or kept
   * alive, less than `keepAliveMs` ago. Never rejects:
   * a failed wake is logged, and the schedule publishes the events anyway.
   * In a Lambda producer, await it before returning (a frozen invocation
   * sends nothing). Resolves to what it did.
   */
  wake(): Promise<WakeOutcome>;
  /** Invocations started so far. */
  readonly invocations: number;
  /** Wakes that invoked nothing because a relay held a slot (with `db`). */
  readonly skippedWhileRunning: number;
}

/**
 * Wake on commit: lets a producer start the relay right after its commit, so
 * an event does not wait for the next schedule tick when the relay scales to
 * zero between events (docs/deploy.md, "Elastic relay"). With `db`, it
 * wakes the relay only while no relay runs; without, it is debounced per
 * process. The producer's role needs `lambda:InvokeFunction` on the relay
 * function.
 *
 * @example
 * const waker = createRelayWaker({ functionName: process.env.OUTBOX_RELAY_FUNCTION!, db: pool });
 * await withTransaction(pool, async (client) => { ...; await enqueueEvent(client, event); });
 * await waker.wake();
 */
export function createRelayWaker(options: RelayWakerOptions): RelayWaker {
  if (typeof options?.functionName !== 'string' || options.functionName.trim() === '') {
    throw new ConfigError('functionName', "expected the relay function's name or ARN");
  }
  const keepAliveMs = options.keepAliveMs ?? 500;
  const timeoutMs = options.timeoutMs ?? 2_000;
  for (const [name, value] of [
    ['keepAliveMs', keepAliveMs],
    ['timeoutMs', timeoutMs],
  ] as const) {
    if (!Number.isFinite(value) || value < 0)
      throw new ConfigError(name, `expected milliseconds >= 0 (got ${value})`);
  }
  const logger = options.logger ?? silentLogger;
  const now = options.now ?? Date.now;
  let lambda = options.lambda;
  let lastWakeAt = Number.NEGATIVE_INFINITY;
  let invocations = 0;
  let skippedWhileRunning = 0;
  const { db, schema } = options;
  const running = db ? () => anyRelaySlotHeld(db, schema) : undefined;

  async function invoke(): Promise<void> {
    const { InvokeCommand, LambdaClient } = await loadLambda();
    lambda ??= new LambdaClient({ maxAttempts: 2 });
    await lambda.send(
      new InvokeCommand({
        FunctionName: options.functionName,
        InvocationType: 'Event',
        Payload: Buffer.from(JSON.stringify({ source: WAKE_SOURCE })),
      }),
      { abortSignal: AbortSignal.timeout(timeoutMs) },
    );
  }

  return {
    get invocations() {
      return invocations;
    },
    get skippedWhileRunning() {
      return skippedWhileRunning;
    },
    async wake(): Promise<WakeOutcome> {
      if (running) {
        try {
          if (await running()) {
            skippedWhileRunning++;
            return 'relay-running';
          }
        } catch (error) {
          logger.warn('could not look for a running relay; waking it', { error: String(error) });
        }
      } else {
        const at = now();
        const quiet = at - lastWakeAt >= keepAliveMs;
        lastWakeAt = at;
        if (!quiet) return 'debounced';
      }
      invocations++;
      try {
        await invoke();
        return 'invoked';
      } catch (error) {
        // The next wake tries again; the schedule is the safety net.
        lastWakeAt = Number.NEGATIVE_INFINITY;
        logger.warn('could not wake the relay; the schedule will publish the events', {
          function_name: options.functionName,
          error: String(error),
        });
        return 'failed';
      }
    },
  };
}
