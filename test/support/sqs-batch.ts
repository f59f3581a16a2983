/**
 * Test support, not product code: it stands in for Lambda's SQS event source
 * mapping only so that a test can call the consumer handler on its own,
 * against a real queue in the emulator.
 *
 * In AWS, and locally in the emulator that runs the deployed stack, the event
 * source mapping polls the queue, invokes the function and deletes what its
 * partial batch response did not report as failed. Nothing here replaces that:
 * a test receives a batch itself (`receiveBatch`), calls the handler directly
 * with it, and deletes what the handler acknowledged (`deleteAcknowledged`).
 * Whole-batch failures, retry timing and visibility are the mapping's and the
 * queue's business and are not imitated.
 */
import { DeleteMessageBatchCommand, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { toSqsEvent } from './sqs-event.js';

export interface TestQueue {
  url: string;
  arn: string;
}

/**
 * One ReceiveMessage call (up to 10 messages, all system and message
 * attributes, as the mapping receives), as the `SQSEvent` Lambda would
 * deliver: `messageId`, `receiptHandle`, `body`, `attributes` (with
 * `ApproximateReceiveCount`), `messageAttributes`, `eventSourceARN`,
 * `awsRegion`, ... The event may have no records.
 */
export async function receiveBatch(sqs: SQSClient, queue: TestQueue, waitTimeSeconds = 1): Promise<SQSEvent> {
  const { Messages = [] } = await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: queue.url,
      MaxNumberOfMessages: 10,
      WaitTimeSeconds: waitTimeSeconds,
      MessageSystemAttributeNames: ['All'],
      MessageAttributeNames: ['All'],
    }),
  );
  return toSqsEvent(Messages, queue.arn);
}

/**
 * Deletes the records of `event` that the handler's partial batch response
 * (ReportBatchItemFailures; no response means all succeeded) did not report
 * as failed; the failed ones stay on the queue. Throws when the response names
 * a record that is not in the batch: Lambda would refuse such an answer, so a
 * test must not pass with it.
 */
export async function deleteAcknowledged(
  sqs: SQSClient,
  queue: TestQueue,
  event: SQSEvent,
  response: Pick<SQSBatchResponse, 'batchItemFailures'> | undefined,
): Promise<{ deleted: number; failed: number }> {
  const inBatch = new Set(event.Records.map((r) => r.messageId));
  const failed = new Set<string>();
  for (const { itemIdentifier } of response?.batchItemFailures ?? []) {
    if (!inBatch.has(itemIdentifier)) {
      throw new Error(
        `invalid partial batch response: ${JSON.stringify(itemIdentifier)} is not in the batch`,
      );
    }
    failed.add(itemIdentifier);
  }
  const acknowledged = event.Records.filter((r) => !failed.has(r.messageId));
  let deleted = 0;
  for (let i = 0; i < acknowledged.length; i += 10) {
    const { Successful = [], Failed = [] } = await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queue.url,
        Entries: acknowledged
          .slice(i, i + 10)
          .map((r, k) => ({ Id: String(k), ReceiptHandle: r.receiptHandle })),
      }),
    );
    if (Failed.length > 0) throw new Error(`delete failed: ${JSON.stringify(Failed)}`);
    deleted += Successful.length;
  }
  return { deleted, failed: event.Records.length - deleted };
}
