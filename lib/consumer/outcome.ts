import type { SQSBatchResponse } from './sqs-types.js';

/**
 * What became of one SQS record.
 * - `processed`: the handler ran and its writes committed with the dedupe row.
 * - `duplicate`: this consumer had already processed the event; nothing ran.
 * - `failed`: the handler (or the database) failed; the transaction rolled back.
 * - `malformed`: not JSON, no valid envelope, or no handler for its type.
 * - `blocked`: not tried because an earlier record of its FIFO message group
 *   failed in this batch; processing it would break the group's order.
 * - `deferred`: not tried because time ran out or the database is unreachable.
 *
 * All but `processed` and `duplicate` are reported in `batchItemFailures`.
 */
export type RecordStatus = 'processed' | 'duplicate' | 'failed' | 'malformed' | 'blocked' | 'deferred';

export interface RecordOutcome {
  messageId: string;
  status: RecordStatus;
  /** Known once the body was read. */
  eventId?: string | undefined;
  eventType?: string | undefined;
  /** Why the record was not acknowledged. */
  error?: Error | undefined;
}

/**
 * The batch's outcome: `batchItemFailures` is the Lambda partial batch
 * response; the counts feed metrics.
 */
export interface ConsumerResult extends SQSBatchResponse {
  processed: number;
  duplicates: number;
  /** Records in `batchItemFailures` (failed, malformed, blocked and deferred). */
  failed: number;
  /** One per record, in the batch's order. */
  outcomes: RecordOutcome[];
}

export function isAcknowledged(outcome: RecordOutcome): boolean {
  return outcome.status === 'processed' || outcome.status === 'duplicate';
}

export function summarize(outcomes: RecordOutcome[]): ConsumerResult {
  const failures = outcomes.filter((o) => !isAcknowledged(o));
  return {
    batchItemFailures: failures.map((o) => ({ itemIdentifier: o.messageId })),
    processed: outcomes.filter((o) => o.status === 'processed').length,
    duplicates: outcomes.filter((o) => o.status === 'duplicate').length,
    failed: failures.length,
    outcomes,
  };
}
