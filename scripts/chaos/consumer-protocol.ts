import { createHash } from 'node:crypto';

/** One message as a consumer process received it (before handling it). */
export interface Receipt {
  eventId: string;
  /** Per-aggregate commit counter (the `x-chaos-n` header). */
  n: number;
  aggregateId: string;
  /** The SQS message id: the same for a redelivery, a new one for a message the relay sent again. */
  messageId: string;
  /** Set on a replay's message. */
  replayId?: string | undefined;
}

/** What a consumer process tells the suite over IPC. */
export type ConsumerReport =
  | { type: 'ready' }
  | { type: 'received'; items: Receipt[] }
  | { type: 'batch-start' }
  | { type: 'batch-done'; processed: number; duplicates: number; failed: number; deleted: number }
  | { type: 'error'; error: string };

/** The events whose handler throws on the first delivery of a message: a fixed share by event id. */
export function failsOnFirstDelivery(eventId: string, perMille: number): boolean {
  if (perMille <= 0) return false;
  return createHash('sha256').update(eventId).digest().readUInt32BE(0) % 1000 < perMille;
}

/** The consumers' table: one row per handler run that committed (no unique key: a double commit shows). */
export const HANDLED_DDL = `
  CREATE TABLE IF NOT EXISTS chaos_handled (
    handled_seq bigserial PRIMARY KEY,
    consumer text NOT NULL,
    event_id uuid NOT NULL,
    aggregate_id text NOT NULL,
    n int NOT NULL,
    replay_id uuid,
    message_id text NOT NULL,
    receive_count int NOT NULL,
    sent_at timestamptz,
    payload_ok boolean NOT NULL,
    process text NOT NULL,
    handled_at timestamptz NOT NULL DEFAULT clock_timestamp()
  )`;

/** The two consumers every consumer process runs on each batch. */
export const CONSUMERS = { skip: 'chaos-skip', handle: 'chaos-handle' } as const;
