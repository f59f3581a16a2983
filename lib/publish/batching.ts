import type { OutboxEvent } from '../outbox/types.js';
import { type CallFailure, classifyCallError } from './aws-errors.js';
import { MessageBuildError } from './messages.js';
import type { FailureInfo, SendContext, TargetResult } from './types.js';

/**
 * Splits items into batches of at most `maxEntries` items and `maxBytes`
 * total size, keeping their order. Each item must fit on its own (callers
 * reject oversize items before batching).
 */
export function chunkBySize<T>(
  items: readonly T[],
  sizeOf: (item: T) => number,
  maxEntries: number,
  maxBytes: number,
): T[][] {
  const batches: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const item of items) {
    const size = sizeOf(item);
    if (current.length > 0 && (current.length >= maxEntries || bytes + size > maxBytes)) {
      batches.push(current);
      current = [];
      bytes = 0;
    }
    current.push(item);
    bytes += size;
  }
  if (current.length > 0) batches.push(current);
  return batches;
}

/** A call that was never made: the deadline had passed, or the target is backed off. */
class CallNotMade extends Error {
  constructor(
    readonly failure: CallFailure,
    readonly retryAfterMs: number,
  ) {
    super(failure.message);
    this.name = 'CallNotMade';
  }
}

/**
 * Makes one API call under the publish context: not at all once the deadline
 * has passed or while the target's circuit is open; with the deadline's abort
 * signal; and with its result reported to the circuit breaker. Call it when
 * the call is really about to start (inside the concurrency limiter), so that
 * calls queued behind a failing one see the circuit open.
 */
export async function guardedCall<T>(
  context: SendContext,
  call: (abortSignal: AbortSignal | undefined) => Promise<T>,
): Promise<T> {
  const { signal, gate } = context;
  if (signal?.aborted) {
    throw new CallNotMade(deadlineFailure('the publish deadline passed before the call started'), 0);
  }
  if (gate && !gate.allowCall()) {
    const failure: CallFailure = {
      kind: 'network',
      retryable: true,
      environment: true,
      code: 'TargetUnavailable',
      message: 'the target is backed off after repeated failures; waiting for a probe to succeed',
    };
    throw new CallNotMade(failure, gate.retryAfterMs());
  }
  try {
    const result = await call(signal);
    gate?.report(undefined);
    return result;
  } catch (error) {
    const failure = signal?.aborted ? deadlineFailure(String(error)) : classifyCallError(error);
    gate?.report(failure);
    throw error;
  }
}

function deadlineFailure(message: string): CallFailure {
  return { kind: 'deadline', retryable: true, environment: true, code: 'DeadlineExceeded', message };
}

/** What every entry of a call that failed as a whole gets. */
function wholeCallFailure(
  error: unknown,
  context: SendContext,
): { failure: CallFailure; retryAfterMs?: number } {
  if (error instanceof CallNotMade) return { failure: error.failure, retryAfterMs: error.retryAfterMs };
  if (context.signal?.aborted) return { failure: deadlineFailure(String(error)) };
  return { failure: classifyCallError(error) };
}

function failAll<P extends { event: OutboxEvent }>(
  batch: P[],
  label: string,
  results: Map<string, TargetResult>,
  { failure, retryAfterMs }: { failure: CallFailure; retryAfterMs?: number },
) {
  for (const p of batch) {
    results.set(p.event.id, {
      ok: false,
      retryable: failure.retryable,
      environment: failure.environment,
      code: failure.code,
      error: `${label} ${failure.kind} error: ${failure.code}: ${failure.message}`,
      retryAfterMs,
    });
  }
}

/**
 * Runs one batch call. When the call fails as a whole, every event of the
 * batch gets that failure, except when the request was refused for something
 * one entry holds (`invalid-request`): then the entries are sent one by one,
 * so only the culprit fails and its neighbours go through.
 */
export async function sendBatchOrSplit<P extends { event: OutboxEvent }>(
  batch: P[],
  label: string,
  results: Map<string, TargetResult>,
  call: (batch: P[]) => Promise<void>,
  context: SendContext = {},
): Promise<void> {
  try {
    await call(batch);
  } catch (error) {
    const failed = wholeCallFailure(error, context);
    if (failed.failure.kind === 'invalid-request' && batch.length > 1) {
      await Promise.all(batch.map((p) => sendBatchOrSplit([p], label, results, call, context)));
      return;
    }
    failAll(batch, label, results, failed);
  }
}

/** The aggregate an event belongs to: the unit of order. */
export function aggregateKey(event: Pick<OutboxEvent, 'aggregateType' | 'aggregateId'>): string {
  return `${event.aggregateType}\u0000${event.aggregateId}`;
}

/** An event not sent, or not counted as sent, because an earlier one of its aggregate was not delivered. */
export function heldBack(error: string, code = 'HeldBack'): { ok: false } & FailureInfo {
  return { ok: false, retryable: true, environment: true, heldBack: true, code, error };
}

const notSent = (culprit: string) =>
  heldBack(
    `not sent: event ${culprit} of the same aggregate, before it, was not delivered; it goes after that one`,
  );

/**
 * Ordered mode: of the events that could not even be tried (`results` holds
 * their failure), every later event of the same aggregate is held back too.
 * Returns the items still to send.
 */
export function holdBehindFailures<P extends { event: OutboxEvent }>(
  events: readonly OutboxEvent[],
  items: readonly P[],
  results: Map<string, TargetResult>,
): P[] {
  const byId = new Map(items.map((p) => [p.event.id, p]));
  const failed = new Map<string, string>();
  const keep: P[] = [];
  for (const event of events) {
    const key = aggregateKey(event);
    const culprit = failed.get(key);
    const item = byId.get(event.id);
    if (culprit !== undefined) {
      if (item) results.set(event.id, notSent(culprit));
    } else if (item) {
      keep.push(item);
    } else if (results.get(event.id)?.ok === false) {
      failed.set(key, event.id);
    }
  }
  return keep;
}

export interface OrderedPlan {
  /**
   * Most events of one aggregate in one call. Calls run in rounds; an
   * aggregate is in at most one call per round, and its next events go in a
   * later round, once the earlier ones were accepted. 1 where the target
   * keeps no order inside a call (EventBridge, a standard queue); up to
   * `maxEntries` for an SQS FIFO queue, which enqueues a call's messages in
   * the order they are listed.
   */
  perCall: number;
  maxEntries: number;
  maxBytes: number;
}

/**
 * Sends items (in seq order) so that an aggregate's events reach the target
 * in order: rounds of calls, each aggregate in at most one call per round
 * with at most `perCall` of its events, in order. After the round, an
 * aggregate whose event was not accepted stops there: the events after it in
 * the same call are marked held back even if the target accepted them (an SQS
 * FIFO queue may enqueue them, see docs/ordering.md), and its remaining
 * events are not sent. A call refused as a whole for one entry
 * (`invalid-request`) is retried one entry per call, each aggregate in turn.
 */
export async function sendOrdered<P extends { event: OutboxEvent; bytes: number }>(
  items: readonly P[],
  plan: OrderedPlan,
  label: string,
  results: Map<string, TargetResult>,
  call: (batch: P[]) => Promise<void>,
  context: SendContext = {},
): Promise<void> {
  const queues = new Map<string, P[]>();
  for (const p of items) {
    const key = aggregateKey(p.event);
    const queue = queues.get(key);
    if (queue) queue.push(p);
    else queues.set(key, [p]);
  }
  let pending = [...queues.values()];
  while (pending.length > 0) {
    const chunks = pending.map((queue) => {
      const chunk: P[] = [];
      let bytes = 0;
      for (const p of queue) {
        if (chunk.length > 0 && (chunk.length >= plan.perCall || bytes + p.bytes > plan.maxBytes)) break;
        chunk.push(p);
        bytes += p.bytes;
      }
      return { queue, chunk, bytes };
    });
    // First fit: small chunks of several aggregates share a call.
    const calls: Array<{ items: P[]; bytes: number }> = [];
    for (const { chunk, bytes } of chunks) {
      const fit = calls.find(
        (c) => c.items.length + chunk.length <= plan.maxEntries && c.bytes + bytes <= plan.maxBytes,
      );
      if (fit) {
        fit.items.push(...chunk);
        fit.bytes += bytes;
      } else {
        calls.push({ items: [...chunk], bytes });
      }
    }
    await Promise.all(
      calls.map(async ({ items: batch }) => {
        try {
          await call(batch);
        } catch (error) {
          const failed = wholeCallFailure(error, context);
          if (failed.failure.kind === 'invalid-request' && batch.length > 1) {
            await sendOrdered(batch, { ...plan, perCall: 1, maxEntries: 1 }, label, results, call, context);
            return;
          }
          failAll(batch, label, results, failed);
        }
      }),
    );
    const next: P[][] = [];
    for (const { queue, chunk } of chunks) {
      const at = chunk.findIndex((p) => results.get(p.event.id)?.ok !== true);
      if (at === -1) {
        if (queue.length > chunk.length) next.push(queue.slice(chunk.length));
        continue;
      }
      const culprit = chunk[at]!.event.id;
      for (const p of chunk.slice(at + 1)) {
        const result = results.get(p.event.id);
        if (result?.ok === true) {
          results.set(
            p.event.id,
            heldBack(
              `${label} accepted it in the same call after event ${culprit} of the same aggregate failed; ` +
                'it is sent again after that one (see docs/ordering.md on partial batch failures)',
              'AcceptedAfterFailure',
            ),
          );
        } else if (result === undefined || result.heldBack) {
          results.set(p.event.id, notSent(culprit));
        }
      }
      for (const p of queue.slice(chunk.length)) results.set(p.event.id, notSent(culprit));
    }
    pending = next;
  }
}

/**
 * The result for an event whose payload could not be stored in S3 (the claim
 * check): classified like a failed call of the transport's own (access
 * denied, a missing bucket, throttling, the deadline: the environment's).
 */
export function payloadStoreFailure(error: unknown, context: SendContext): TargetResult {
  const { failure, retryAfterMs } = wholeCallFailure(error, context);
  return {
    ok: false,
    retryable: failure.retryable,
    environment: failure.environment,
    code: failure.code,
    error: `storing the payload in S3 failed: ${failure.kind} error: ${failure.code}: ${failure.message}`,
    retryAfterMs,
  };
}

/** The result for an event that could not be turned into a message. */
export function buildFailure(error: unknown): TargetResult {
  const e = error as { message?: string };
  if (error instanceof MessageBuildError) {
    return {
      ok: false,
      retryable: false,
      environment: false,
      code: 'InvalidEvent',
      error: `cannot build the message: ${e.message}`,
    };
  }
  return {
    ok: false,
    retryable: true,
    environment: false,
    code: 'BuildFailed',
    error: `building the message failed: ${e?.message ?? String(error)}`,
  };
}
