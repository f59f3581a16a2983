// Test support: turns received SQS messages into the records Lambda's event
// source mapping delivers, so a handler can be tested alone.
import type { Message, MessageAttributeValue } from '@aws-sdk/client-sqs';
import type { SQSEvent, SQSMessageAttribute, SQSRecord, SQSRecordAttributes } from 'aws-lambda';
import { ValidationError } from '../../lib/errors.js';

/** The system attributes every Lambda SQS record carries. */
const REQUIRED_ATTRIBUTES = [
  'ApproximateReceiveCount',
  'SentTimestamp',
  'SenderId',
  'ApproximateFirstReceiveTimestamp',
] as const;

/**
 * The region of an SQS queue ARN (a record's `awsRegion`).
 *
 * @example
 * regionOfQueueArn('arn:aws:sqs:eu-north-1:123456789012:orders'); // 'eu-north-1'
 */
export function regionOfQueueArn(queueArn: string): string {
  const parts = queueArn.split(':');
  if (parts.length !== 6 || parts[0] !== 'arn' || parts[2] !== 'sqs' || !parts[3]) {
    throw new ValidationError(
      'queueArn',
      `expected arn:<partition>:sqs:<region>:<account>:<name>, got "${queueArn}"`,
    );
  }
  return parts[3];
}

function toBase64(value: Uint8Array | undefined): string | undefined {
  return value === undefined ? undefined : Buffer.from(value).toString('base64');
}

/** Lambda's shape of a message attribute: camelCase, binary as base64, empty list fields. */
function toRecordAttribute(value: MessageAttributeValue): SQSMessageAttribute {
  const attribute: SQSMessageAttribute = {
    stringListValues: value.StringListValues ?? [],
    binaryListValues: (value.BinaryListValues ?? []).map((v) => toBase64(v) as string),
    dataType: value.DataType ?? 'String',
  };
  if (value.StringValue !== undefined) attribute.stringValue = value.StringValue;
  if (value.BinaryValue !== undefined) attribute.binaryValue = toBase64(value.BinaryValue);
  return attribute;
}

/**
 * Converts one message from `ReceiveMessage` into the record Lambda's SQS
 * event source mapping would deliver. Receive with
 * `MessageSystemAttributeNames: ['All']` and `MessageAttributeNames: ['All']`,
 * as the mapping does; a message without the system attributes is refused.
 *
 * @example
 * const record = toSqsRecord(message, 'arn:aws:sqs:us-east-1:123456789012:orders');
 */
export function toSqsRecord(message: Message, queueArn: string): SQSRecord {
  const { MessageId, ReceiptHandle, Body, MD5OfBody } = message;
  if (!MessageId || !ReceiptHandle || Body === undefined || !MD5OfBody) {
    throw new ValidationError('message', 'expected MessageId, ReceiptHandle, Body and MD5OfBody');
  }
  const attributes = { ...(message.Attributes ?? {}) } as Record<string, string>;
  for (const name of REQUIRED_ATTRIBUTES) {
    if (attributes[name] === undefined) {
      throw new ValidationError(
        `message.Attributes.${name}`,
        "missing: receive with MessageSystemAttributeNames: ['All']",
      );
    }
  }
  const messageAttributes: Record<string, SQSMessageAttribute> = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    messageAttributes[name] = toRecordAttribute(value);
  }
  const record: SQSRecord = {
    messageId: MessageId,
    receiptHandle: ReceiptHandle,
    body: Body,
    attributes: attributes as unknown as SQSRecordAttributes,
    messageAttributes,
    md5OfBody: MD5OfBody,
    eventSource: 'aws:sqs',
    eventSourceARN: queueArn,
    awsRegion: regionOfQueueArn(queueArn),
  };
  if (message.MD5OfMessageAttributes) record.md5OfMessageAttributes = message.MD5OfMessageAttributes;
  return record;
}

/**
 * Converts received messages into the `SQSEvent` a Lambda function with an
 * SQS trigger receives, records in the order received.
 *
 * @example
 * const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({
 *   QueueUrl, MaxNumberOfMessages: 10,
 *   MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'],
 * }));
 * const result = await consumer.handleSqsEvent(toSqsEvent(Messages, queueArn));
 */
export function toSqsEvent(messages: readonly Message[], queueArn: string): SQSEvent {
  return { Records: messages.map((m) => toSqsRecord(m, queueArn)) };
}
