import { ValidationError } from '../errors.js';
import type { HandleOptions } from './consumer.js';
import type { SQSEvent, SQSMessageAttribute, SQSRecord, SQSRecordAttributes } from './sqs-types.js';

/**
 * A message attribute as `ReceiveMessage` returns it (the SDK's
 * `MessageAttributeValue`).
 */
export interface ReceivedMessageAttribute {
  StringValue?: string | undefined;
  BinaryValue?: Uint8Array | undefined;
  StringListValues?: string[] | undefined;
  BinaryListValues?: Uint8Array[] | undefined;
  DataType?: string | undefined;
}

/**
 * A message as `ReceiveMessage` returns it: the fields of the SDK's
 * `Message` (`@aws-sdk/client-sqs`) that the consumer reads, so a `Message`
 * is accepted as is and this entry point's types need no SDK package.
 */
export interface ReceivedMessage {
  MessageId?: string | undefined;
  ReceiptHandle?: string | undefined;
  MD5OfBody?: string | undefined;
  Body?: string | undefined;
  /** System attributes: receive with `MessageSystemAttributeNames: ['All']`. */
  Attributes?: Partial<Record<string, string>> | undefined;
  MD5OfMessageAttributes?: string | undefined;
  /** Receive with `MessageAttributeNames: ['All']` to get the producer's `traceparent`. */
  MessageAttributes?: Record<string, ReceivedMessageAttribute> | undefined;
}

/**
 * The queue the messages were received from, by ARN or by URL. A FIFO queue
 * (name ending in `.fifo`) has its message groups kept in order. A URL names
 * its region only on AWS (`https://sqs.<region>.amazonaws.com/...`); for
 * another endpoint (an emulator, a VPC endpoint) give `region` as well.
 */
export type QueueRef =
  | { queueArn: string; queueUrl?: never; region?: never }
  | { queueUrl: string; region?: string | undefined; queueArn?: never };

/** Options of `consumer.handleMessages`: where the messages came from, and the time left. */
export type HandleMessagesOptions = HandleOptions & QueueRef;

/** Always present when received with `MessageSystemAttributeNames: ['All']`, as Lambda does. */
const REQUIRED_ATTRIBUTES = [
  'ApproximateReceiveCount',
  'SentTimestamp',
  'SenderId',
  'ApproximateFirstReceiveTimestamp',
] as const;

const ARN = /^arn:(aws[a-z-]*):sqs:([a-z0-9-]+):(\d{12}):([\w-]{1,80}(?:\.fifo)?)$/;

/** `{ arn, region }` of the queue, from its ARN or its URL. */
function queueIdentity(queue: QueueRef): { arn: string; region: string } {
  if (queue.queueArn !== undefined) {
    const match = ARN.exec(queue.queueArn);
    if (!match) {
      throw new ValidationError(
        'queueArn',
        `expected arn:<partition>:sqs:<region>:<account>:<name>, got "${queue.queueArn}"`,
      );
    }
    return { arn: queue.queueArn, region: match[2] as string };
  }
  let url: URL;
  try {
    url = new URL(queue.queueUrl);
  } catch {
    throw new ValidationError('queueUrl', `expected a queue URL, got "${queue.queueUrl}"`);
  }
  const path = /^\/(\d{12})\/([\w-]{1,80}(?:\.fifo)?)$/.exec(url.pathname);
  if (!path) {
    throw new ValidationError(
      'queueUrl',
      `expected <endpoint>/<account>/<queue name>, got "${queue.queueUrl}"`,
    );
  }
  // sqs.<region>.amazonaws.com, <region>.queue.amazonaws.com (legacy), and .com.cn in China.
  const host = /^(?:sqs\.([a-z0-9-]+)|([a-z0-9-]+)\.queue)\.amazonaws\.com(\.cn)?$/.exec(url.hostname);
  const region = queue.region ?? host?.[1] ?? host?.[2];
  if (!region) {
    throw new ValidationError(
      'region',
      `the region of ${queue.queueUrl} cannot be told from its host; pass region or queueArn`,
    );
  }
  const partition = host?.[3] ? 'aws-cn' : region.startsWith('us-gov-') ? 'aws-us-gov' : 'aws';
  return { arn: `arn:${partition}:sqs:${region}:${path[1]}:${path[2]}`, region };
}

const base64 = (value: Uint8Array) => Buffer.from(value).toString('base64');

/** Lambda's shape of a message attribute: camelCase, binary as base64. */
function recordAttribute(value: ReceivedMessageAttribute): SQSMessageAttribute {
  const attribute: SQSMessageAttribute = {
    stringListValues: value.StringListValues ?? [],
    binaryListValues: (value.BinaryListValues ?? []).map(base64),
    dataType: value.DataType ?? 'String',
  };
  if (value.StringValue !== undefined) attribute.stringValue = value.StringValue;
  if (value.BinaryValue !== undefined) attribute.binaryValue = base64(value.BinaryValue);
  return attribute;
}

function toRecord(
  message: ReceivedMessage,
  index: number,
  queue: { arn: string; region: string },
): SQSRecord {
  const { MessageId, ReceiptHandle, Body, MD5OfBody } = message;
  if (!MessageId || !ReceiptHandle || Body === undefined || !MD5OfBody) {
    throw new ValidationError(
      `messages[${index}]`,
      'expected a message from ReceiveMessage (MessageId, ReceiptHandle, Body, MD5OfBody)',
    );
  }
  const attributes = { ...(message.Attributes ?? {}) };
  // A FIFO message without its group would lose the group's order.
  const required = queue.arn.endsWith('.fifo')
    ? [...REQUIRED_ATTRIBUTES, 'MessageGroupId']
    : REQUIRED_ATTRIBUTES;
  const missing = required.filter((name) => attributes[name] === undefined);
  if (missing.length > 0) {
    throw new ValidationError(
      `messages[${index}].Attributes`,
      `${missing.join(', ')} missing: receive with MessageSystemAttributeNames: ['All']`,
    );
  }
  const messageAttributes: Record<string, SQSMessageAttribute> = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    messageAttributes[name] = recordAttribute(value);
  }
  const record: SQSRecord = {
    messageId: MessageId,
    receiptHandle: ReceiptHandle,
    body: Body,
    attributes: attributes as unknown as SQSRecordAttributes,
    messageAttributes,
    md5OfBody: MD5OfBody,
    eventSource: 'aws:sqs',
    eventSourceARN: queue.arn,
    awsRegion: queue.region,
  };
  if (message.MD5OfMessageAttributes) record.md5OfMessageAttributes = message.MD5OfMessageAttributes;
  return record;
}

/**
 * Turns messages received with the SDK's `ReceiveMessage` into the event
 * Lambda's SQS event source would deliver for them, records in the order
 * received: what `consumer.handleMessages` does before handling them. The
 * consumer reads the body, the message id, the system attributes
 * (`ApproximateReceiveCount`; `MessageGroupId` and `SequenceNumber` on a
 * FIFO queue; `AWSTraceHeader`) and the message attributes (the producer's
 * `traceparent`).
 *
 * Throws a {@link ValidationError} for a message received without its system
 * attributes (ask for `MessageSystemAttributeNames: ['All']`) and for a
 * queue ARN or URL that is not one.
 *
 * @example
 * const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({
 *   QueueUrl: queueUrl,
 *   MaxNumberOfMessages: 10,
 *   WaitTimeSeconds: 20,
 *   MessageSystemAttributeNames: ['All'],
 *   MessageAttributeNames: ['All'],
 * }));
 * const event = sqsEventFromMessages(Messages, { queueUrl });
 */
export function sqsEventFromMessages(messages: readonly ReceivedMessage[], queue: QueueRef): SQSEvent {
  if (!Array.isArray(messages)) throw new ValidationError('messages', 'expected an array of messages');
  const identity = queueIdentity(queue);
  return { Records: messages.map((m, i) => toRecord(m, i, identity)) };
}
