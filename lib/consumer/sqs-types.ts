/**
 * The SQS event shapes of Lambda's SQS event source, written out here (the
 * same fields as `@types/aws-lambda`'s `SQSEvent`, `SQSRecord` and
 * `SQSBatchResponse`, which are assignable to them and from them) so that the
 * consumer's published declarations need no `@types/aws-lambda`: a consumer
 * that polls SQS itself, or a TypeScript project without Lambda types, checks
 * against these.
 */

export interface SQSRecordAttributes {
  AWSTraceHeader?: string | undefined;
  ApproximateReceiveCount: string;
  SentTimestamp: string;
  SenderId: string;
  ApproximateFirstReceiveTimestamp: string;
  SequenceNumber?: string | undefined;
  MessageGroupId?: string | undefined;
  MessageDeduplicationId?: string | undefined;
  DeadLetterQueueSourceArn?: string | undefined;
}

export interface SQSMessageAttribute {
  stringValue?: string | undefined;
  binaryValue?: string | undefined;
  stringListValues?: string[] | undefined;
  binaryListValues?: string[] | undefined;
  dataType: string;
}

export type SQSMessageAttributes = Record<string, SQSMessageAttribute>;

/** One record of an SQS event, as Lambda delivers it. */
export interface SQSRecord {
  messageId: string;
  receiptHandle: string;
  body: string;
  attributes: SQSRecordAttributes;
  messageAttributes: SQSMessageAttributes;
  md5OfBody: string;
  md5OfMessageAttributes?: string;
  eventSource: string;
  eventSourceARN: string;
  awsRegion: string;
}

/** The event Lambda's SQS event source invokes a function with. */
export interface SQSEvent {
  Records: SQSRecord[];
}

export interface SQSBatchItemFailure {
  itemIdentifier: string;
}

/** What a function with `ReportBatchItemFailures` returns: the records to retry. */
export interface SQSBatchResponse {
  batchItemFailures: SQSBatchItemFailure[];
}
