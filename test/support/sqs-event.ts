// Test support: received SQS messages as the records Lambda's event source
// mapping delivers, through the library's own conversion (the one
// consumer.handleMessages uses), so a handler can be tested alone.
import type { Message } from '@aws-sdk/client-sqs';
import { sqsEventFromMessages } from '../../lib/consumer/sdk-messages.js';
import type { SQSEvent, SQSRecord } from '../../lib/consumer/sqs-types.js';

/** One received message as the Lambda record of the queue `queueArn`. */
export function toSqsRecord(message: Message, queueArn: string): SQSRecord {
  return sqsEventFromMessages([message], { queueArn }).Records[0] as SQSRecord;
}

/** Received messages as the `SQSEvent` a Lambda function with an SQS trigger receives. */
export function toSqsEvent(messages: readonly Message[], queueArn: string): SQSEvent {
  return sqsEventFromMessages(messages, { queueArn });
}
