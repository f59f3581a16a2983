import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { SQSEvent, SQSRecord } from 'aws-lambda';
import { ConfigError, OutboxError } from '../errors.js';
import { toSqsEvent } from './sqs-event.js';

export interface SqsEventSourceOptions {
  sqs: Pick<SQSClient, 'send'>;
  queueUrl: string;
  /** Looked up with GetQueueAttributes on first use when absent. */
  queueArn?: string | undefined;
  /** Messages per batch, 1 to 10 (one ReceiveMessage call). Default 10. */
  batchSize?: number | undefined;
  /** Long polling wait, 0 to 20 seconds. Default 20, as Lambda's poller. */
  waitTimeSeconds?: number | undefined;
  /** Visibility timeout for received messages; the queue's own when absent. */
  visibilityTimeout?: number | undefined;
}

/** What one poll did. */
export interface PollResult {
  received: number;
  /** Acknowledged records, deleted from the queue. */
  deleted: number;
  /** Records left on the queue for a retry (reported failures, or all when the handler threw). */
  failed: number;
  /** Set when the handler threw or answered with an invalid response: the whole batch is retried. */
  error?: Error | undefined;
}

export interface SettleOptions {
  /**
   * Make failed records visible again after this many seconds instead of
   * after the visibility timeout. Lambda does not do this; local runs and
   * tests use it to retry quickly.
   */
  retryDelaySeconds?: number | undefined;
}

/** A Lambda SQS handler: answers a partial batch response, or nothing when every record succeeded. */
type BatchHandler = (event: SQSEvent) => Promise<unknown>;

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/**
 * The records a handler's answer reports as failed, read as Lambda reads it:
 * no answer, or no or an empty `batchItemFailures`, means all succeeded; an
 * item identifier that is empty or not a message id of the batch makes the
 * whole answer invalid.
 */
function failedMessageIds(event: SQSEvent, response: unknown): Set<string> {
  const failures =
    typeof response === 'object' && response !== null
      ? (response as { batchItemFailures?: unknown }).batchItemFailures
      : undefined;
  if (failures === undefined || failures === null) return new Set();
  if (!Array.isArray(failures))
    throw new OutboxError('invalid partial batch response: batchItemFailures is not a list');
  const known = new Set(event.Records.map((r) => r.messageId));
  const ids = new Set<string>();
  for (const failure of failures as Array<{ itemIdentifier?: unknown } | null>) {
    const id = failure?.itemIdentifier;
    if (typeof id !== 'string' || !known.has(id)) {
      throw new OutboxError(
        `invalid partial batch response: ${JSON.stringify(id)} is not a message id of the batch`,
      );
    }
    ids.add(id);
  }
  return ids;
}

/**
 * Polls an SQS queue the way Lambda's SQS event source mapping does, for local
 * runs and tests: receive a batch (all system and message attributes),
 * hand it to the function as an `SQSEvent`, then delete the records the
 * partial batch response did not report as failed. A handler that throws, or
 * answers with an item identifier that is not in the batch, fails the whole
 * batch, as with Lambda.
 *
 * @example
 * const source = new SqsEventSource({ sqs, queueUrl });
 * for (;;) {
 *   const { received, failed } = await source.pollOnce((event) => consumer.handleSqsEvent(event));
 *   if (received === 0) break;
 * }
 */
export class SqsEventSource {
  private arn: string | undefined;
  private readonly batchSize: number;
  private readonly waitTimeSeconds: number;

  constructor(private readonly options: SqsEventSourceOptions) {
    this.arn = options.queueArn;
    this.batchSize = options.batchSize ?? 10;
    this.waitTimeSeconds = options.waitTimeSeconds ?? 20;
    if (!Number.isInteger(this.batchSize) || this.batchSize < 1 || this.batchSize > 10) {
      throw new ConfigError('batchSize', 'expected an integer from 1 to 10');
    }
    if (!Number.isInteger(this.waitTimeSeconds) || this.waitTimeSeconds < 0 || this.waitTimeSeconds > 20) {
      throw new ConfigError('waitTimeSeconds', 'expected an integer from 0 to 20');
    }
  }

  /** The queue's ARN (the records' `eventSourceARN`). */
  async queueArn(): Promise<string> {
    if (this.arn) return this.arn;
    const { Attributes } = await this.options.sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: this.options.queueUrl, AttributeNames: ['QueueArn'] }),
    );
    if (!Attributes?.QueueArn) throw new OutboxError(`no QueueArn for ${this.options.queueUrl}`);
    this.arn = Attributes.QueueArn;
    return this.arn;
  }

  /** One ReceiveMessage call, as an `SQSEvent` (possibly with no records). */
  async receive(): Promise<SQSEvent> {
    const queueArn = await this.queueArn();
    const { Messages = [] } = await this.options.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: this.options.queueUrl,
        MaxNumberOfMessages: this.batchSize,
        WaitTimeSeconds: this.waitTimeSeconds,
        VisibilityTimeout: this.options.visibilityTimeout,
        MessageSystemAttributeNames: ['All'],
        MessageAttributeNames: ['All'],
      }),
    );
    return toSqsEvent(Messages, queueArn);
  }

  /**
   * Deletes the records that `response` (the handler's answer: an
   * `SQSBatchResponse`, or nothing) did not report as failed. Returns how many
   * were deleted and how many stay on the queue.
   *
   * @throws {OutboxError} for a response Lambda would refuse (the whole batch
   *   then stays on the queue).
   */
  async settle(
    event: SQSEvent,
    response: unknown,
    options: SettleOptions = {},
  ): Promise<{ deleted: number; failed: number }> {
    const failedIds = failedMessageIds(event, response);
    const acknowledged = event.Records.filter((r) => !failedIds.has(r.messageId));
    const failed = event.Records.filter((r) => failedIds.has(r.messageId));
    const deleted = await this.deleteRecords(acknowledged);
    if (options.retryDelaySeconds !== undefined && failed.length > 0) {
      await this.changeVisibility(failed, options.retryDelaySeconds);
    }
    return { deleted, failed: event.Records.length - deleted };
  }

  /** Receives one batch, runs `handler` on it and settles the result. */
  async pollOnce(handler: BatchHandler, options: SettleOptions = {}): Promise<PollResult> {
    const event = await this.receive();
    const received = event.Records.length;
    if (received === 0) return { received, deleted: 0, failed: 0 };
    try {
      const response = await handler(event);
      return { received, ...(await this.settle(event, response, options)) };
    } catch (error) {
      if (options.retryDelaySeconds !== undefined) {
        await this.changeVisibility(event.Records, options.retryDelaySeconds);
      }
      return { received, deleted: 0, failed: received, error: error as Error };
    }
  }

  private async deleteRecords(records: readonly SQSRecord[]): Promise<number> {
    let deleted = 0;
    for (const batch of chunks(records, 10)) {
      const { Successful = [] } = await this.options.sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: this.options.queueUrl,
          Entries: batch.map((r, i) => ({ Id: String(i), ReceiptHandle: r.receiptHandle })),
        }),
      );
      // A failed delete is not an error: the message comes back and the
      // consumer skips it as a duplicate.
      deleted += Successful.length;
    }
    return deleted;
  }

  private async changeVisibility(records: readonly SQSRecord[], seconds: number): Promise<void> {
    for (const batch of chunks(records, 10)) {
      await this.options.sqs.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: this.options.queueUrl,
          Entries: batch.map((r, i) => ({
            Id: String(i),
            ReceiptHandle: r.receiptHandle,
            VisibilityTimeout: seconds,
          })),
        }),
      );
    }
  }
}
