import type { Queryable } from '../db/queryable.js';
import { resolveSchema } from '../db/schema.js';
import { ConfigError } from '../errors.js';
import { type OutboxLogger, silentLogger } from '../observer.js';
import { optionalImportOnce } from '../optional-dependency.js';
import { WAKE_SOURCE } from '../relay/invocation.js';
import { claimRelayWake } from '../sql/relay-wake.js';

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
   * Without `db`: wakes closer together than this invoke nothing, the relay
   * woken by the earlier one being still running, kept alive by the events
   * it found (its idle tail restarts with every claim that finds work). Keep
   * it under the relay's idle tail (`OUTBOX_IDLE_TAIL_MS`, 1 s in the
   * reference stack) less a poll (0.5 s). Default 500 ms.
   */
  keepAliveMs?: number;
  /**
   * The outbox's database (your pool, best: a wake may still use it after
   * it resolved). Given, wakes are shared by every producer process through
   * it: a wake invokes nothing while a relay holds a slot of
   * `outbox_relay_slots` (that relay takes the event, or looks for it as it
   * leaves), nor while another wake's relay is starting (`startGraceMs`).
   * So a burst of commits from many processes starts one relay. Needs a
   * relay with `OUTBOX_MAX_RELAYS` (relay slots), as the reference stack
   * deploys it. A failed look falls back to the per-process `keepAliveMs`.
   */
  db?: Queryable;
  /** The schema of the outbox tables, as given to `migrate({ schema })`. Default: `OUTBOX_SCHEMA`. */
  schema?: string;
  /**
   * With `db`: how long a woken relay may take to hold its slot (its cold
   * start) before another wake invokes one again. A relay that takes or
   * lets go of a slot ends the window at once. Default 3,000 ms.
   */
  startGraceMs?: number;
  /**
   * Longest a `wake()` keeps its caller waiting; the Invoke goes on in the
   * background. Default 40 ms: with a timer's lateness on a busy event loop,
   * a wake stays within 50 ms.
   */
  waitMs?: number;
  /** Longest wait for the Invoke call. Default 2,000 ms. */
  timeoutMs?: number;
  /** After a failed Invoke, no Invoke for this long, doubling with each failure in a row. Default 1,000 ms. */
  backoffBaseMs?: number;
  /** The longest backoff. Default 60,000 ms (the reference stack's schedule). */
  backoffMaxMs?: number;
  logger?: OutboxLogger;
  /** Clock (tests). */
  now?: () => number;
}

/**
 * What a wake did by the time it resolved:
 * - `invoked`: Lambda accepted the Invoke (the relay starts);
 * - `in-flight`: the Invoke (or the look before it) was still under way
 *   after `waitMs`, or an earlier wake's still was (it covers this commit);
 *   it goes on in the background, and a failure is logged and backs off;
 * - `relay-running`: a relay held a slot and takes the events (with `db`);
 * - `debounced`: a wake started a relay lately (with `db`: one that has not
 *   taken its slot yet; without: less than `keepAliveMs` ago);
 * - `backing-off`: an Invoke failed lately; none is made until the backoff ends;
 * - `failed`: the Invoke failed (logged); wakes back off.
 *
 * Whatever it did, the schedule publishes the events.
 */
export type WakeOutcome = 'invoked' | 'in-flight' | 'relay-running' | 'debounced' | 'backing-off' | 'failed';

export interface RelayWaker {
  /**
   * Call right after a transaction that enqueued events has committed.
   * Starts a relay invocation (`InvocationType: 'Event'`, asynchronous)
   * unless a relay runs or is starting, or an Invoke failed lately (see
   * {@link WakeOutcome}). Resolves within `waitMs` (40 ms) whatever the
   * Lambda endpoint does (hung, refused, throttled), and never rejects.
   *
   * In a Lambda producer, await it before returning (a frozen invocation
   * sends nothing): by then the Invoke was accepted (a warm client takes
   * 10–30 ms), failed, or is `in-flight`; one in flight when the function
   * freezes goes on when it thaws, or times out. To wait for Lambda's
   * answer, raise `waitMs` to `timeoutMs`.
   */
  wake(): Promise<WakeOutcome>;
  /** Invocations started so far (Invokes sent, accepted or not). */
  readonly invocations: number;
  /** Wakes that invoked nothing because a relay held a slot (with `db`). */
  readonly skippedWhileRunning: number;
}

/**
 * Wake on commit: lets a producer start the relay right after its commit, so
 * an event does not wait for the next schedule tick when the relay scales to
 * zero between events (docs/deploy.md, "Elastic relay"). With `db`, all
 * producers together start one relay while none runs; without, wakes are
 * debounced per process. The producer's role needs `lambda:InvokeFunction` on
 * the relay function.
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
  const ms = {
    keepAliveMs: options.keepAliveMs ?? 500,
    startGraceMs: options.startGraceMs ?? 3_000,
    waitMs: options.waitMs ?? 40,
    timeoutMs: options.timeoutMs ?? 2_000,
    backoffBaseMs: options.backoffBaseMs ?? 1_000,
    backoffMaxMs: options.backoffMaxMs ?? 60_000,
  };
  for (const [name, value] of Object.entries(ms)) {
    if (!Number.isFinite(value) || value < 0)
      throw new ConfigError(name, `expected milliseconds >= 0 (got ${value})`);
  }
  // Importing the SDK holds the event loop for about 100 ms: now, not in a
  // commit's wake. A missing package fails the first wake (logged).
  loadLambda().catch(() => {});
  const logger = options.logger ?? silentLogger;
  const now = options.now ?? Date.now;
  const { db } = options;
  const schema = resolveSchema(options.schema);
  let lambda = options.lambda;
  let lastWakeAt = Number.NEGATIVE_INFINITY;
  let failures = 0;
  let backoffUntil = Number.NEGATIVE_INFINITY;
  let attempt: Promise<WakeOutcome> | undefined;
  let invocations = 0;
  let skippedWhileRunning = 0;

  /** Why not to invoke, or undefined: invoke. */
  async function look(): Promise<'relay-running' | 'debounced' | undefined> {
    if (db) {
      try {
        const skip = await claimRelayWake(db, { graceMs: ms.startGraceMs, schema });
        if (skip === 'relay-running') skippedWhileRunning++;
        return skip;
      } catch (error) {
        logger.warn('could not look for a running relay; waking it', { error: String(error) });
      }
    }
    const at = now();
    const quiet = at - lastWakeAt >= ms.keepAliveMs;
    lastWakeAt = at;
    return quiet ? undefined : 'debounced';
  }

  async function invoke(): Promise<void> {
    const { InvokeCommand, LambdaClient } = await loadLambda();
    lambda ??= new LambdaClient({ maxAttempts: 2 });
    await lambda.send(
      new InvokeCommand({
        FunctionName: options.functionName,
        InvocationType: 'Event',
        Payload: Buffer.from(JSON.stringify({ source: WAKE_SOURCE })),
      }),
      { abortSignal: AbortSignal.timeout(ms.timeoutMs) },
    );
  }

  /** Looks, invokes if it should, and backs off after a failure. Never rejects. */
  async function tryWake(): Promise<WakeOutcome> {
    const skip = await look();
    if (skip) return skip;
    invocations++;
    try {
      await invoke();
      failures = 0;
      return 'invoked';
    } catch (error) {
      failures++;
      const backoffMs = Math.min(ms.backoffMaxMs, ms.backoffBaseMs * 2 ** (failures - 1));
      backoffUntil = now() + backoffMs;
      lastWakeAt = Number.NEGATIVE_INFINITY;
      logger.warn('could not wake the relay; the schedule will publish the events', {
        function_name: options.functionName,
        error: String(error),
        backoff_ms: backoffMs,
      });
      return 'failed';
    }
  }

  return {
    get invocations() {
      return invocations;
    },
    get skippedWhileRunning() {
      return skippedWhileRunning;
    },
    async wake(): Promise<WakeOutcome> {
      // One attempt at a time: the relay it starts also takes this commit's events.
      if (attempt) return 'in-flight';
      if (now() < backoffUntil) return 'backing-off';
      const current = tryWake().finally(() => {
        attempt = undefined;
      });
      attempt = current;
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<WakeOutcome>((resolve) => {
        timer = setTimeout(resolve, ms.waitMs, 'in-flight');
      });
      return Promise.race([current, late]).finally(() => clearTimeout(timer));
    },
  };
}
