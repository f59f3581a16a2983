import {
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';

/** One message as received: the event it carries, in arrival order. */
export interface Received {
  eventId: string;
  /** Per-aggregate commit counter from the payload. */
  n: number;
  aggregateId: string;
}

/** Pulls the event out of an SQS body or an EventBridge event delivered through SQS. */
export function parseBody(body: string): Received | undefined {
  try {
    const parsed = JSON.parse(body);
    const envelope = parsed?.detail && parsed['detail-type'] ? parsed.detail : parsed;
    return {
      eventId: String(envelope.id),
      n: Number(envelope.payload?.n),
      aggregateId: String(envelope.aggregateId),
    };
  } catch {
    return undefined;
  }
}

async function depth(sqs: SQSClient, queueUrl: string): Promise<number> {
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  return (
    Number(Attributes?.ApproximateNumberOfMessages ?? 0) +
    Number(Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0)
  );
}

/**
 * Receives and deletes every message of a queue, with `parallel` receivers,
 * until the queue is empty. Messages are recorded in the order their
 * ReceiveMessage returned; on a FIFO queue a group's next messages are only
 * handed out once the previous ones are deleted, so that order is the
 * group's order even with several receivers.
 */
export async function receiveEverything(
  sqs: SQSClient,
  queueUrl: string,
  options: { parallel: number; timeoutMs: number },
): Promise<{ messages: Received[]; unparsable: number; complete: boolean }> {
  const messages: Received[] = [];
  let unparsable = 0;
  const deadline = Date.now() + options.timeoutMs;
  let empties = 0;
  let complete = false;
  const receiver = async () => {
    while (Date.now() < deadline && !complete) {
      const { Messages = [] } = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 1,
          VisibilityTimeout: 120,
        }),
      );
      for (const m of Messages) {
        const parsed = parseBody(m.Body ?? '');
        if (parsed) messages.push(parsed);
        else unparsable++;
      }
      if (Messages.length > 0) {
        empties = 0;
        await sqs.send(
          new DeleteMessageBatchCommand({
            QueueUrl: queueUrl,
            Entries: Messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
          }),
        );
      } else if (++empties >= options.parallel * 2 && (await depth(sqs, queueUrl)) === 0) {
        complete = true;
      }
    }
  };
  await Promise.all(Array.from({ length: options.parallel }, receiver));
  return { messages, unparsable, complete };
}
