import { createHash, randomUUID } from 'node:crypto';
import type { Consumer } from '../consumer/consumer.js';
import { type ConsumerResult, summarize } from '../consumer/outcome.js';
import type { ReceivedMessage } from '../consumer/sdk-messages.js';
import { messageGroupId } from '../publish/messages.js';
import type { PublishedMessage } from './in-memory-publisher.js';

/** The queue an EventBridge rule feeds, when `deliver` is not told another. */
export const DEFAULT_RULE_QUEUE_URL = 'https://sqs.us-east-1.amazonaws.com/000000000000/outbox-test-rule';

export interface DeliverOptions {
  /**
   * The queue an EventBridge rule sends bus messages to (a FIFO one if its
   * name ends in `.fifo`). Default {@link DEFAULT_RULE_QUEUE_URL}. Messages
   * sent to a queue are received from that queue.
   */
  ruleQueueUrl?: string | undefined;
}

export interface DeliverResult extends ConsumerResult {
  /** The messages not acknowledged (in `batchItemFailures`): SQS would deliver them again. */
  redeliver: PublishedMessage[];
}

/** What a consumer needs to take messages: `createConsumer`'s result has it. */
export type MessageConsumer = Pick<Consumer, 'name' | 'handleMessages'>;

const md5 = (text: string) => createHash('md5').update(text).digest('hex');

/**
 * Hands messages to consumers as SQS would: one `handleMessages` call per
 * queue, with the records Lambda's event source builds (body, message and
 * system attributes, receive count, FIFO group and sequence number). A
 * message delivered again to the same consumer keeps its message id and
 * counts one more receive.
 */
export class Deliverer {
  private readonly receives = new WeakMap<object, Map<string, { count: number; first: number }>>();
  private sequence = 0n;

  async deliver(
    consumer: MessageConsumer,
    messages: readonly PublishedMessage[],
    options: DeliverOptions = {},
  ): Promise<DeliverResult> {
    const byQueue = new Map<string, PublishedMessage[]>();
    for (const message of messages) {
      const queue =
        message.type === 'sqs' ? message.queueUrl : (options.ruleQueueUrl ?? DEFAULT_RULE_QUEUE_URL);
      byQueue.set(queue, [...(byQueue.get(queue) ?? []), message]);
    }
    const outcomes: ConsumerResult['outcomes'] = [];
    for (const [queueUrl, list] of byQueue) {
      const received = list.map((m) => this.received(consumer, m, queueUrl.endsWith('.fifo')));
      const result = await consumer.handleMessages(received, { queueUrl, region: regionOf(queueUrl) });
      outcomes.push(...result.outcomes);
    }
    const result = summarize(outcomes);
    const failed = new Set(result.batchItemFailures.map((f) => f.itemIdentifier));
    return { ...result, redeliver: messages.filter((m) => failed.has(m.messageId)) };
  }

  /** The message as `ReceiveMessage` returns it, with every system attribute. */
  private received(consumer: MessageConsumer, message: PublishedMessage, fifo: boolean): ReceivedMessage {
    const counts = this.receives.get(consumer) ?? new Map();
    this.receives.set(consumer, counts);
    const receive = counts.get(message.messageId) ?? { count: 0, first: Date.now() };
    receive.count++;
    counts.set(message.messageId, receive);
    const attributes: Record<string, string> = {
      ApproximateReceiveCount: String(receive.count),
      SentTimestamp: String(message.sentAt),
      SenderId: 'AIDAOUTBOXTESTKIT0000',
      ApproximateFirstReceiveTimestamp: String(receive.first),
    };
    const { body, trace, groupId, deduplicationId } = wire(message);
    if (trace) attributes.AWSTraceHeader = trace;
    if (fifo) {
      attributes.MessageGroupId = groupId ?? messageGroupId(message.envelope);
      attributes.MessageDeduplicationId = deduplicationId ?? message.envelope.id;
      attributes.SequenceNumber = String(++this.sequence).padStart(20, '0');
    }
    const messageAttributes = message.type === 'sqs' ? message.entry.MessageAttributes : undefined;
    return {
      MessageId: message.messageId,
      ReceiptHandle: randomUUID(),
      Body: body,
      MD5OfBody: md5(body),
      Attributes: attributes,
      MessageAttributes: messageAttributes,
    };
  }
}

/** The body a queue holds, and the system attributes it came with. */
function wire(message: PublishedMessage): {
  body: string;
  trace?: string | undefined;
  groupId?: string | undefined;
  deduplicationId?: string | undefined;
} {
  if (message.type === 'sqs') {
    const { entry } = message;
    return {
      body: entry.MessageBody,
      trace: entry.MessageSystemAttributes?.AWSTraceHeader?.StringValue,
      groupId: entry.MessageGroupId,
      deduplicationId: entry.MessageDeduplicationId,
    };
  }
  // An EventBridge rule with a queue target delivers the whole event; the
  // envelope is its `detail`, as the relay's text (no number re-serialized).
  const { entry } = message;
  const body =
    `{"version":"0","id":${JSON.stringify(message.messageId)},"detail-type":${JSON.stringify(entry.DetailType)}` +
    `,"source":${JSON.stringify(entry.Source)},"account":"000000000000"` +
    `,"time":"${new Date(message.sentAt).toISOString().replace(/\.\d{3}Z$/, 'Z')}"` +
    `,"region":"us-east-1","resources":[],"detail":${entry.Detail}}`;
  return { body, trace: entry.TraceHeader };
}

/** The region in an AWS queue URL; any other endpoint (an emulator) gets us-east-1. */
function regionOf(queueUrl: string): string {
  const host = new URL(queueUrl).hostname;
  return /^sqs\.([a-z0-9-]+)\.amazonaws\.com/.exec(host)?.[1] ?? 'us-east-1';
}
