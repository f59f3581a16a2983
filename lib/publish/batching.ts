import type { OutboxEvent } from '../outbox/types.js';
import { classifyCallError } from './aws-errors.js';
import type { TargetResult } from './types.js';

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
): Promise<void> {
  try {
    await call(batch);
  } catch (error) {
    const failure = classifyCallError(error);
    if (failure.kind === 'invalid-request' && batch.length > 1) {
      await Promise.all(batch.map((p) => sendBatchOrSplit([p], label, results, call)));
      return;
    }
    for (const p of batch) {
      results.set(p.event.id, {
        ok: false,
        retryable: failure.retryable,
        code: failure.code,
        error: `${label} ${failure.kind} error: ${failure.code}: ${failure.message}`,
      });
    }
  }
}
