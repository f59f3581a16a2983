import { randomBytes } from 'node:crypto';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { S3Client } from '@aws-sdk/client-s3';
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  type Message,
  ReceiveMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { inject } from 'vitest';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };

/** SDK clients pointed at the emulator the test run started (or was given). */
export function awsClients() {
  const endpoint = inject('awsEndpoint');
  const config = { endpoint, region: 'us-east-1', credentials, maxAttempts: 2 };
  return {
    endpoint,
    sqs: new SQSClient(config),
    eventBridge: new EventBridgeClient(config),
    // Path-style: emulators do not resolve <bucket>.<host> names.
    s3: new S3Client({ ...config, forcePathStyle: true }),
  };
}

/** A queue name no other test file uses. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${randomBytes(5).toString('hex')}`;
}

export async function createQueue(
  sqs: SQSClient,
  name: string,
  attributes: Record<string, string> = {},
): Promise<{ url: string; arn: string }> {
  const fifo = name.endsWith('.fifo');
  const created = await sqs.send(
    new CreateQueueCommand({
      QueueName: name,
      Attributes: { ...(fifo ? { FifoQueue: 'true' } : {}), ...attributes },
    }),
  );
  const url = created.QueueUrl as string;
  const attrs = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['QueueArn'] }),
  );
  return { url, arn: attrs.Attributes?.QueueArn as string };
}

/**
 * Receives until `count` messages arrived or `timeoutMs` passed. With
 * `deleteReceived`, each batch is deleted as it arrives (FIFO groups only
 * release their next message once the previous one is deleted); otherwise
 * messages stay invisible for 5 minutes so they are not received twice.
 */
async function receive(
  sqs: SQSClient,
  queueUrl: string,
  count: number,
  timeoutMs: number,
  deleteReceived: boolean,
): Promise<Message[]> {
  const messages: Message[] = [];
  const deadline = Date.now() + timeoutMs;
  while (messages.length < count && Date.now() < deadline) {
    const received = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 1,
        MessageAttributeNames: ['All'],
        MessageSystemAttributeNames: ['All'],
        ...(deleteReceived ? {} : { VisibilityTimeout: 300 }),
      }),
    );
    const batch = received.Messages ?? [];
    messages.push(...batch);
    if (deleteReceived && batch.length > 0) {
      await sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: batch.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
        }),
      );
    }
  }
  return messages;
}

/** Receives until `count` messages arrived or `timeoutMs` passed; deletes nothing. */
export const receiveAll = (sqs: SQSClient, queueUrl: string, count: number, timeoutMs = 10_000) =>
  receive(sqs, queueUrl, count, timeoutMs, false);

/** Receives and deletes, until `count` messages arrived or `timeoutMs` passed. */
export const drainQueue = (sqs: SQSClient, queueUrl: string, count: number, timeoutMs = 30_000) =>
  receive(sqs, queueUrl, count, timeoutMs, true);
