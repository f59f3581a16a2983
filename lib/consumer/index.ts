/**
 * `pg-lambda-outbox/consumer`: handle outbox events delivered by SQS (straight
 * from the relay or through an EventBridge rule), each at most once per
 * consumer name, in one transaction with the handler's own writes.
 */

export type { Envelope, PayloadRef } from '../publish/envelope.js';
export { type Consumer, createConsumer, type HandleOptions } from './consumer.js';
export { MalformedMessageError } from './errors.js';
export {
  defineHandlers,
  type EventHandler,
  type HandlerContext,
  type HandlerMap,
  type MessageSource,
} from './handlers.js';
export { LargePayloadError } from './large-payload.js';
export type { ConsumerLargePayloadOptions, ConsumerOptions } from './options.js';
export type { ConsumerResult, RecordOutcome, RecordStatus } from './outcome.js';
export type { RecordTrace } from './record-trace.js';
export {
  type HandleMessagesOptions,
  type QueueRef,
  type ReceivedMessage,
  type ReceivedMessageAttribute,
  sqsEventFromMessages,
} from './sdk-messages.js';
export type {
  SQSBatchItemFailure,
  SQSBatchResponse,
  SQSEvent,
  SQSMessageAttribute,
  SQSMessageAttributes,
  SQSRecord,
  SQSRecordAttributes,
} from './sqs-types.js';
