import type {
  EventBridgeClient,
  PutEventsCommandOutput,
  PutEventsRequestEntry,
} from '@aws-sdk/client-eventbridge';
import { optionalImportOnce } from '../optional-dependency.js';
import type { OutboxEvent } from '../outbox/types.js';
import { classifyEntryError } from './aws-errors.js';
import {
  buildFailure,
  chunkBySize,
  guardedCall,
  holdBehindFailures,
  sendBatchOrSplit,
  sendOrdered,
} from './batching.js';
import { NO_BUCKET_HINT, type PayloadStore, prepareWithPointers } from './claim-check.js';
import { DirectCaller, type DirectCapableClient } from './direct-calls.js';
import type { PayloadRef } from './envelope.js';
import { EVENTBRIDGE_MAX_ENTRY_BYTES } from './limits.js';
import { eventBridgeMessage, publishedPayloadBytes } from './messages.js';
import type { SendContext, TargetResult, Transport } from './types.js';

/**
 * The SDK's command classes, loaded at the first call: the caller brings the
 * client, and a service that only writes events never loads the SDK.
 */
const loadEventBridge = optionalImportOnce(
  '@aws-sdk/client-eventbridge',
  'EventBridge targets',
  () => import('@aws-sdk/client-eventbridge'),
);

/** PutEvents takes at most 10 entries. */
export const EVENTBRIDGE_MAX_BATCH_ENTRIES = 10;

export interface EventBridgeTransportOptions {
  client: Pick<EventBridgeClient, 'send'>;
  busName: string;
  /** The events' `Source`. */
  source: string;
  /** Transport key; defaults to `eventbridge:<bus>`. */
  key?: string | undefined;
  /** Per-entry and per-call limit; default 1 MiB (limits.ts). */
  maxBytes?: number | undefined;
  schedule?: <T>(call: () => Promise<T>) => Promise<T>;
  onCall?: (() => void) | undefined;
  /** Stores payloads whose entry is over `maxBytes` in S3 (the claim check); without it such events fail. */
  payloads?: PayloadStore | undefined;
  /** Send PutEvents directly after the first call (direct-calls.ts). */
  directCalls?: boolean | undefined;
}

interface Prepared {
  event: OutboxEvent;
  entry: PutEventsRequestEntry;
  bytes: number;
}

/**
 * Publishes to one EventBridge bus with PutEvents: `Source` from config,
 * `DetailType` = event type, `Detail` = the envelope. Each response entry is
 * matched to its event by position, as the API specifies.
 */
export class EventBridgeTransport implements Transport {
  readonly key: string;
  private readonly maxBytes: number;
  private readonly direct: DirectCaller<PutEventsCommandOutput> | undefined;

  constructor(private readonly options: EventBridgeTransportOptions) {
    this.key = options.key ?? `eventbridge:${options.busName}`;
    this.maxBytes = options.maxBytes ?? EVENTBRIDGE_MAX_ENTRY_BYTES;
    this.direct = options.directCalls
      ? new DirectCaller(options.client as unknown as DirectCapableClient)
      : undefined;
  }

  async send(events: readonly OutboxEvent[], context: SendContext = {}): Promise<Map<string, TargetResult>> {
    const results = new Map<string, TargetResult>();
    const sendable: Prepared[] = [];
    const oversize: OutboxEvent[] = [];
    const payloads = this.options.payloads;
    const prepare = (event: OutboxEvent, payloadRef?: PayloadRef) => {
      // A payload over the limit on its own goes to the claim check at once:
      // no message of several MiB is built (and held) just to be measured.
      if (payloads && !payloadRef && publishedPayloadBytes(event) > this.maxBytes) {
        oversize.push(event);
        return;
      }
      let message: ReturnType<typeof eventBridgeMessage>;
      try {
        message = eventBridgeMessage(event, {
          busName: this.options.busName,
          source: this.options.source,
          payloadRef,
        });
      } catch (error) {
        results.set(event.id, buildFailure(error));
        return;
      }
      if (message.bytes > this.maxBytes) {
        if (payloads && !payloadRef) {
          oversize.push(event);
          return;
        }
        results.set(event.id, {
          ok: false,
          retryable: false,
          environment: false,
          code: 'EntryTooLarge',
          error: `event is ${message.bytes} bytes as an EventBridge entry, over the limit of ${this.maxBytes} bytes${payloads ? '' : NO_BUCKET_HINT}`,
        });
      } else {
        sendable.push({ event, ...message });
      }
    };
    for (const event of events) prepare(event);
    // The claim check: the payload goes to S3, the entry carries a pointer.
    await prepareWithPointers(oversize, payloads, this.options.schedule, context, results, prepare);
    if (context.ordered) {
      // PutEvents promises no order among a call's entries, so one event per
      // aggregate per call: an aggregate's next event is put only once the
      // previous one was accepted (what ordered mode meant here before runs).
      const plan = { perCall: 1, maxEntries: EVENTBRIDGE_MAX_BATCH_ENTRIES, maxBytes: this.maxBytes };
      const items = holdBehindFailures(events, sendable, results);
      await sendOrdered(items, plan, 'EventBridge', results, this.callFor(results, context), context);
      return results;
    }
    const batches = chunkBySize(sendable, (p) => p.bytes, EVENTBRIDGE_MAX_BATCH_ENTRIES, this.maxBytes);
    await Promise.all(batches.map((batch) => this.sendBatch(batch, results, context)));
    return results;
  }

  private sendBatch(
    batch: Prepared[],
    results: Map<string, TargetResult>,
    context: SendContext,
  ): Promise<void> {
    return sendBatchOrSplit(batch, 'EventBridge', results, this.callFor(results, context), context);
  }

  /** One PutEvents call, its per-entry results written into `results`. */
  private callFor(results: Map<string, TargetResult>, context: SendContext) {
    const schedule = this.options.schedule ?? ((call) => call());
    return async (batch: Prepared[]) => {
      const { PutEventsCommand } = await loadEventBridge();
      const response = await schedule(() =>
        guardedCall(context, (abortSignal) => {
          this.options.onCall?.();
          const input = { Entries: batch.map((p) => p.entry) };
          const command = () => new PutEventsCommand(input);
          return this.direct
            ? this.direct.send(command, input, abortSignal)
            : this.options.client.send(command(), { abortSignal });
        }),
      );
      batch.forEach((p, i) => {
        const entry = response.Entries?.[i];
        if (entry?.EventId && !entry.ErrorCode) {
          results.set(p.event.id, { ok: true });
          return;
        }
        if (!entry?.ErrorCode) {
          results.set(p.event.id, {
            ok: false,
            retryable: true,
            environment: false,
            code: 'MissingResult',
            error: 'EventBridge response had no result for this event',
          });
          return;
        }
        const message = `EventBridge rejected the event: ${entry.ErrorCode}${entry.ErrorMessage ? ` (${entry.ErrorMessage})` : ''}`;
        const failure = classifyEntryError(entry.ErrorCode, message);
        results.set(p.event.id, {
          ok: false,
          retryable: failure.retryable,
          environment: failure.environment,
          code: failure.code,
          error: message,
        });
      });
    };
  }
}
