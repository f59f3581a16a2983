import { createHash } from 'node:crypto';
import {
  type MessageAttributeValue,
  SendMessageBatchCommand,
  type SendMessageBatchRequestEntry,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import { BROKER_MESSAGE_MAX_BYTES } from '../outbox/limits.js';
import type { OutboxEvent } from '../outbox/types.js';
import { chunkBySize, sendBatchOrSplit } from './batching.js';
import { toEnvelope } from './envelope.js';
import type { TargetResult, Transport } from './types.js';

/** SendMessageBatch takes at most 10 entries. */
export const SQS_MAX_BATCH_ENTRIES = 10;

export interface SqsTransportOptions {
  client: Pick<SQSClient, 'send'>;
  queueUrl: string;
  /** Largest message the queue accepts (body + attributes); also the batch limit. Default 256 KiB. */
  maxMessageBytes?: number;
  /** Runs each API call; lets the router bound calls in flight across targets. */
  schedule?: <T>(call: () => Promise<T>) => Promise<T>;
  /** Counts API calls (benchmarks report calls per 1,000 events). */
  onCall?: () => void;
}

interface Prepared {
  event: OutboxEvent;
  entry: SendMessageBatchRequestEntry;
  bytes: number;
}

function attribute(value: string): MessageAttributeValue {
  return { DataType: 'String', StringValue: value };
}

/** SQS counts attribute names, types and values towards the message size. */
function attributesBytes(attributes: Record<string, MessageAttributeValue>): number {
  let bytes = 0;
  for (const [name, value] of Object.entries(attributes)) {
    bytes += Buffer.byteLength(name) + Buffer.byteLength(value.DataType ?? '');
    bytes += Buffer.byteLength(value.StringValue ?? '');
  }
  return bytes;
}

/**
 * MessageGroupId allows at most 128 characters; longer aggregate keys are
 * replaced by their SHA-256 so that one aggregate still maps to one group.
 */
export function messageGroupId(event: Pick<OutboxEvent, 'aggregateType' | 'aggregateId'>): string {
  const key = `${event.aggregateType}:${event.aggregateId}`;
  return key.length <= 128 && /^[\x21-\x7e]+$/.test(key)
    ? key
    : `sha256:${createHash('sha256').update(key).digest('hex')}`;
}

/**
 * Publishes to one SQS queue (standard or FIFO, told by the `.fifo` suffix)
 * with SendMessageBatch: at most 10 entries and `maxMessageBytes` per call,
 * one result per event from the response's `Successful` and `Failed` lists.
 */
export class SqsTransport implements Transport {
  readonly key: string;
  private readonly fifo: boolean;
  private readonly maxBytes: number;

  constructor(private readonly options: SqsTransportOptions) {
    this.key = `sqs:${options.queueUrl}`;
    this.fifo = options.queueUrl.endsWith('.fifo');
    this.maxBytes = options.maxMessageBytes ?? BROKER_MESSAGE_MAX_BYTES;
  }

  private prepare(event: OutboxEvent, index: number): Prepared {
    const body = JSON.stringify(toEnvelope(event));
    const attributes = {
      eventId: attribute(event.id),
      eventType: attribute(event.eventType),
      aggregateType: attribute(event.aggregateType),
      aggregateId: attribute(event.aggregateId),
    };
    const entry: SendMessageBatchRequestEntry = {
      Id: `e${index}`,
      MessageBody: body,
      MessageAttributes: attributes,
    };
    if (this.fifo) {
      entry.MessageGroupId = messageGroupId(event);
      entry.MessageDeduplicationId = event.id;
    }
    return { event, entry, bytes: Buffer.byteLength(body) + attributesBytes(attributes) };
  }

  async send(events: readonly OutboxEvent[]): Promise<Map<string, TargetResult>> {
    const results = new Map<string, TargetResult>();
    const sendable: Prepared[] = [];
    events.forEach((event, i) => {
      const prepared = this.prepare(event, i);
      if (prepared.bytes > this.maxBytes) {
        results.set(event.id, {
          ok: false,
          retryable: false,
          code: 'MessageTooLarge',
          error: `message is ${prepared.bytes} bytes, over the queue's limit of ${this.maxBytes} bytes`,
        });
      } else {
        sendable.push(prepared);
      }
    });
    const batches = chunkBySize(sendable, (p) => p.bytes, SQS_MAX_BATCH_ENTRIES, this.maxBytes);
    await Promise.all(batches.map((batch) => this.sendBatch(batch, results)));
    return results;
  }

  private sendBatch(batch: Prepared[], results: Map<string, TargetResult>): Promise<void> {
    const schedule = this.options.schedule ?? ((call) => call());
    return sendBatchOrSplit(batch, 'SQS', results, async (batch) => {
      const response = await schedule(() => {
        this.options.onCall?.();
        return this.options.client.send(
          new SendMessageBatchCommand({
            QueueUrl: this.options.queueUrl,
            Entries: batch.map((p) => p.entry),
          }),
        );
      });
      const byEntryId = new Map(batch.map((p) => [p.entry.Id, p.event.id]));
      for (const ok of response.Successful ?? []) {
        const eventId = byEntryId.get(ok.Id);
        if (eventId) results.set(eventId, { ok: true });
      }
      for (const failed of response.Failed ?? []) {
        const eventId = byEntryId.get(failed.Id);
        if (!eventId) continue;
        results.set(eventId, {
          ok: false,
          // SenderFault: the entry itself was rejected; retrying it cannot help.
          retryable: !failed.SenderFault,
          code: failed.Code,
          error: `SQS rejected the message: ${failed.Code ?? 'unknown'}${failed.Message ? ` (${failed.Message})` : ''}`,
        });
      }
      for (const p of batch) {
        if (!results.has(p.event.id)) {
          results.set(p.event.id, {
            ok: false,
            retryable: true,
            error: 'SQS response did not mention this message',
          });
        }
      }
    });
  }
}
