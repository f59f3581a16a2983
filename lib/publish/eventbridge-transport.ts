import {
  type EventBridgeClient,
  PutEventsCommand,
  type PutEventsRequestEntry,
} from '@aws-sdk/client-eventbridge';
import { BROKER_MESSAGE_MAX_BYTES } from '../outbox/limits.js';
import type { OutboxEvent } from '../outbox/types.js';
import { isRetryableEventBridgeEntryCode } from './aws-errors.js';
import { chunkBySize, sendBatchOrSplit } from './batching.js';
import { toEnvelope } from './envelope.js';
import type { TargetResult, Transport } from './types.js';

/** PutEvents takes at most 10 entries. */
export const EVENTBRIDGE_MAX_BATCH_ENTRIES = 10;

export interface EventBridgeTransportOptions {
  client: Pick<EventBridgeClient, 'send'>;
  busName: string;
  /** The events' `Source`. */
  source: string;
  /** Per-entry and per-call limit; default 256 KiB. */
  maxBytes?: number;
  schedule?: <T>(call: () => Promise<T>) => Promise<T>;
  onCall?: () => void;
}

interface Prepared {
  event: OutboxEvent;
  entry: PutEventsRequestEntry;
  bytes: number;
}

/**
 * Entry size as EventBridge computes it: 14 bytes for the time field plus the
 * UTF-8 sizes of Source, DetailType and Detail.
 */
export function eventBridgeEntrySize(entry: PutEventsRequestEntry): number {
  return (
    14 +
    Buffer.byteLength(entry.Source ?? '') +
    Buffer.byteLength(entry.DetailType ?? '') +
    Buffer.byteLength(entry.Detail ?? '') +
    (entry.Resources ?? []).reduce((sum, r) => sum + Buffer.byteLength(r), 0)
  );
}

/**
 * Publishes to one EventBridge bus with PutEvents: `Source` from config,
 * `DetailType` = event type, `Detail` = the envelope. Each response entry is
 * matched to its event by position, as the API specifies.
 */
export class EventBridgeTransport implements Transport {
  readonly key: string;
  private readonly maxBytes: number;

  constructor(private readonly options: EventBridgeTransportOptions) {
    this.key = `eventbridge:${options.busName}`;
    this.maxBytes = options.maxBytes ?? BROKER_MESSAGE_MAX_BYTES;
  }

  async send(events: readonly OutboxEvent[]): Promise<Map<string, TargetResult>> {
    const results = new Map<string, TargetResult>();
    const sendable: Prepared[] = [];
    for (const event of events) {
      const entry: PutEventsRequestEntry = {
        EventBusName: this.options.busName,
        Source: this.options.source,
        DetailType: event.eventType,
        Detail: JSON.stringify(toEnvelope(event)),
      };
      const traceHeader = event.headers['x-amzn-trace-id'] ?? event.headers['X-Amzn-Trace-Id'];
      if (traceHeader) entry.TraceHeader = traceHeader;
      const bytes = eventBridgeEntrySize(entry);
      if (bytes > this.maxBytes) {
        results.set(event.id, {
          ok: false,
          retryable: false,
          code: 'EntryTooLarge',
          error: `event is ${bytes} bytes as an EventBridge entry, over the limit of ${this.maxBytes} bytes`,
        });
      } else {
        sendable.push({ event, entry, bytes });
      }
    }
    const batches = chunkBySize(sendable, (p) => p.bytes, EVENTBRIDGE_MAX_BATCH_ENTRIES, this.maxBytes);
    await Promise.all(batches.map((batch) => this.sendBatch(batch, results)));
    return results;
  }

  private sendBatch(batch: Prepared[], results: Map<string, TargetResult>): Promise<void> {
    const schedule = this.options.schedule ?? ((call) => call());
    return sendBatchOrSplit(batch, 'EventBridge', results, async (batch) => {
      const response = await schedule(() => {
        this.options.onCall?.();
        return this.options.client.send(new PutEventsCommand({ Entries: batch.map((p) => p.entry) }));
      });
      batch.forEach((p, i) => {
        const entry = response.Entries?.[i];
        if (entry?.EventId && !entry.ErrorCode) {
          results.set(p.event.id, { ok: true });
        } else {
          const code = entry?.ErrorCode ?? 'MissingResult';
          results.set(p.event.id, {
            ok: false,
            retryable: isRetryableEventBridgeEntryCode(code),
            code,
            error: `EventBridge rejected the event: ${code}${entry?.ErrorMessage ? ` (${entry.ErrorMessage})` : ''}`,
          });
        }
      });
    });
  }
}
