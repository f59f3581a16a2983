import { randomBytes } from 'node:crypto';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import {
  CreateQueueCommand,
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
  return { endpoint, sqs: new SQSClient(config), eventBridge: new EventBridgeClient(config) };
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

/** Receives until `count` messages arrived or `timeoutMs` passed; deletes nothing. */
export async function receiveAll(
  sqs: SQSClient,
  queueUrl: string,
  count: number,
  timeoutMs = 10_000,
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
        VisibilityTimeout: 300,
      }),
    );
    messages.push(...(received.Messages ?? []));
  }
  return messages;
}

/** Receives and deletes (FIFO groups only release their next message once the previous is deleted). */
export async function drainQueue(
  sqs: SQSClient,
  queueUrl: string,
  count: number,
  timeoutMs = 30_000,
): Promise<Message[]> {
  const { DeleteMessageBatchCommand } = await import('@aws-sdk/client-sqs');
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
      }),
    );
    const batch = received.Messages ?? [];
    messages.push(...batch);
    if (batch.length > 0) {
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
