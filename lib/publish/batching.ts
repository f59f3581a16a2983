import type { OutboxEvent } from '../outbox/types.js';
import { type CallFailure, classifyCallError } from './aws-errors.js';
import { MessageBuildError } from './messages.js';
import type { SendContext, TargetResult } from './types.js';

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
    let failure: CallFailure;
    let retryAfterMs: number | undefined;
    if (error instanceof CallNotMade) {
      failure = error.failure;
      retryAfterMs = error.retryAfterMs;
    } else if (context.signal?.aborted) {
      failure = deadlineFailure(String(error));
    } else {
      failure = classifyCallError(error);
    }
    if (failure.kind === 'invalid-request' && batch.length > 1) {
      await Promise.all(batch.map((p) => sendBatchOrSplit([p], label, results, call, context)));
      return;
    }
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
