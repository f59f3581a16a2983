import { hash } from 'node:crypto';
import type {
  SendMessageBatchCommandOutput,
  SendMessageBatchRequestEntry,
  SQSClient,
} from '@aws-sdk/client-sqs';
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
import { SQS_MAX_MESSAGE_BYTES } from './limits.js';
import { publishedPayloadBytes, sqsMessage } from './messages.js';
import type { MessageGroupSource } from './routes.js';
import type { SendContext, TargetResult, Transport } from './types.js';

/**
 * The SDK's command classes, loaded at the first call: the caller brings the
 * client, and a service that only writes events never loads the SDK.
 */
const loadSqs = optionalImportOnce('@aws-sdk/client-sqs', 'SQS targets', () => import('@aws-sdk/client-sqs'));

/** SendMessageBatch takes at most 10 entries. */
export const SQS_MAX_BATCH_ENTRIES = 10;

export interface SqsTransportOptions {
  client: Pick<SQSClient, 'send'>;
  queueUrl: string;
  /** Largest message the queue accepts (body + attributes); also the batch limit. Default 1 MiB (limits.ts). */
  maxMessageBytes?: number | undefined;
  /** A standard queue's MessageGroupId source (fair queues); ignored by FIFO queues, which group by aggregate. */
  messageGroup?: MessageGroupSource | undefined;
  /** Runs each API call; lets the router bound calls in flight across targets. */
  schedule?: <T>(call: () => Promise<T>) => Promise<T>;
  /** Counts API calls (benchmarks report calls per 1,000 events). */
  onCall?: (() => void) | undefined;
  /** Stores payloads whose message is over `maxMessageBytes` in S3 (the claim check); without it such events fail. */
  payloads?: PayloadStore | undefined;
  /**
   * Send SendMessageBatch directly after the first call (direct-calls.ts):
   * the client's credentials, endpoint and HTTP handler, not its middleware.
   */
  directCalls?: boolean | undefined;
}

/**
 * Characters SQS accepts in a message body and attribute values (`#x9 | #xA |
 * #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF`). A message
 * with any other is refused per entry (InvalidMessageContents): checked here
 * first, so that such an event fails before the call, alone, and never in the
 * middle of an aggregate's run inside a FIFO batch.
 */
const INVALID_SQS_CHARACTER = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/u;

function invalidCharacterIn(entry: Omit<SendMessageBatchRequestEntry, 'Id'>): string | undefined {
  if (INVALID_SQS_CHARACTER.test(entry.MessageBody ?? '')) return 'the message body';
  for (const [name, value] of Object.entries(entry.MessageAttributes ?? {})) {
    if (INVALID_SQS_CHARACTER.test(value.StringValue ?? '')) return `the message attribute ${name}`;
  }
  return undefined;
}

interface Prepared {
  event: OutboxEvent;
  entry: SendMessageBatchRequestEntry;
  bytes: number;
}

/**
 * The SDK's check of a SendMessageBatch answer, kept for direct calls: the
 * MD5 SQS reports for each accepted body must be that of the body sent.
 * A mismatch fails the call, as it fails the SDK's.
 */
function checkBodyDigests(
  entries: readonly SendMessageBatchRequestEntry[],
  output: SendMessageBatchCommandOutput,
): void {
  const bodies = new Map(entries.map((e) => [e.Id, e.MessageBody ?? '']));
  const wrong: string[] = [];
  for (const ok of output.Successful ?? []) {
    const body = bodies.get(ok.Id);
    if (body === undefined || !ok.MD5OfMessageBody) continue;
    if (hash('md5', body) !== ok.MD5OfMessageBody) wrong.push(ok.Id ?? '');
  }
  if (wrong.length > 0) throw new Error(`Invalid MD5 checksum on messages: ${wrong.join(', ')}`);
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
  private readonly direct: DirectCaller<SendMessageBatchCommandOutput> | undefined;
  private readonly checkDigests: boolean;

  constructor(private readonly options: SqsTransportOptions) {
    this.key = `sqs:${options.queueUrl}`;
    this.fifo = options.queueUrl.endsWith('.fifo');
    this.maxBytes = options.maxMessageBytes ?? SQS_MAX_MESSAGE_BYTES;
    this.direct = options.directCalls
      ? new DirectCaller(options.client as unknown as DirectCapableClient)
      : undefined;
    // The SQS client's `md5` option (default on) covers direct calls too.
    this.checkDigests = (options.client as { config?: { md5?: boolean } }).config?.md5 !== false;
  }

  async send(events: readonly OutboxEvent[], context: SendContext = {}): Promise<Map<string, TargetResult>> {
    const results = new Map<string, TargetResult>();
    const sendable: Prepared[] = [];
    const oversize: OutboxEvent[] = [];
    const payloads = this.options.payloads;
    const entryIds = new Map(events.map((event, i) => [event.id, `e${i}`]));
    const prepare = (event: OutboxEvent, payloadRef?: PayloadRef) => {
      // A payload over the limit on its own goes to the claim check at once:
      // no message of several MiB is built (and held) just to be measured.
      if (payloads && !payloadRef && publishedPayloadBytes(event) > this.maxBytes) {
        oversize.push(event);
        return;
      }
      let message: ReturnType<typeof sqsMessage>;
      try {
        message = sqsMessage(event, { fifo: this.fifo, payloadRef, group: this.options.messageGroup });
      } catch (error) {
        results.set(event.id, buildFailure(error));
        return;
      }
      const invalid = invalidCharacterIn(message.entry);
      if (message.bytes > this.maxBytes) {
        if (payloads && !payloadRef) {
          oversize.push(event);
          return;
        }
        results.set(event.id, {
          ok: false,
          retryable: false,
          environment: false,
          code: 'MessageTooLarge',
          error: `message is ${message.bytes} bytes, over the queue's limit of ${this.maxBytes} bytes${payloads ? '' : NO_BUCKET_HINT}`,
        });
      } else if (invalid) {
        results.set(event.id, {
          ok: false,
          retryable: false,
          environment: false,
          code: 'InvalidMessageContents',
          error: `${invalid} holds a character SQS does not accept`,
        });
      } else {
        sendable.push({
          event,
          entry: { ...message.entry, Id: entryIds.get(event.id) },
          bytes: message.bytes,
        });
      }
    };
    for (const event of events) prepare(event);
    // The claim check: the payload goes to S3, the message carries a pointer.
    await prepareWithPointers(oversize, payloads, this.options.schedule, context, results, prepare);
    if (context.ordered) {
      // A FIFO queue enqueues one call's messages of a group in the order
      // listed, so an aggregate's run shares a call; a standard queue keeps
      // no order, so one event per aggregate per call.
      const plan = {
        perCall: this.fifo ? SQS_MAX_BATCH_ENTRIES : 1,
        maxEntries: SQS_MAX_BATCH_ENTRIES,
        maxBytes: this.maxBytes,
      };
      const items = holdBehindFailures(events, sendable, results);
      await sendOrdered(items, plan, 'SQS', results, this.callFor(results, context), context);
      return results;
    }
    const batches = chunkBySize(sendable, (p) => p.bytes, SQS_MAX_BATCH_ENTRIES, this.maxBytes);
    await Promise.all(batches.map((batch) => this.sendBatch(batch, results, context)));
    return results;
  }

  private sendBatch(
    batch: Prepared[],
    results: Map<string, TargetResult>,
    context: SendContext,
  ): Promise<void> {
    return sendBatchOrSplit(batch, 'SQS', results, this.callFor(results, context), context);
  }

  /** One SendMessageBatch call, its per-entry results written into `results`. */
  private callFor(results: Map<string, TargetResult>, context: SendContext) {
    const schedule = this.options.schedule ?? ((call) => call());
    return async (batch: Prepared[]) => {
      const { SendMessageBatchCommand } = await loadSqs();
      const input = { QueueUrl: this.options.queueUrl, Entries: batch.map((p) => p.entry) };
      const response = await schedule(() =>
        guardedCall(context, async (abortSignal) => {
          this.options.onCall?.();
          const command = () => new SendMessageBatchCommand(input);
          if (!this.direct) return this.options.client.send(command(), { abortSignal });
          const direct = this.direct.direct;
          const output = await this.direct.send(command, input, abortSignal);
          // The SDK checks the digests of its own calls; a direct call's are checked here.
          if (direct && this.checkDigests) checkBodyDigests(input.Entries, output);
          return output;
        }),
      );
      const byEntryId = new Map(batch.map((p) => [p.entry.Id, p.event.id]));
      for (const ok of response.Successful ?? []) {
        const eventId = byEntryId.get(ok.Id);
        if (eventId) results.set(eventId, { ok: true });
      }
      for (const failed of response.Failed ?? []) {
        const eventId = byEntryId.get(failed.Id);
        if (!eventId) continue;
        const message = `SQS rejected the message: ${failed.Code ?? 'unknown'}${failed.Message ? ` (${failed.Message})` : ''}`;
        const failure = classifyEntryError(failed.Code, message, failed.SenderFault);
        results.set(eventId, {
          ok: false,
          retryable: failure.retryable,
          environment: failure.environment,
          code: failure.code,
          error: message,
        });
      }
      for (const p of batch) {
        if (!results.has(p.event.id)) {
          results.set(p.event.id, {
            ok: false,
            retryable: true,
            environment: false,
            code: 'MissingResult',
            error: 'SQS response did not mention this message',
          });
        }
      }
    };
  }
}
