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
  /** Set on a replay's message. */
  replayId?: string | undefined;
  /** The SQS message id, when known: a redelivery of one message has the same. */
  messageId?: string | undefined;
}

/** Pulls the event out of an SQS body or an EventBridge event delivered through SQS. */
export function parseBody(body: string): Received | undefined {
  try {
    const parsed = JSON.parse(body);
    const envelope = parsed?.detail && parsed['detail-type'] ? parsed.detail : parsed;
    // The counter is also a header: a large payload travels in S3, not in the message.
    return {
      eventId: String(envelope.id),
      n: Number(envelope.headers?.['x-chaos-n'] ?? envelope.payload?.n),
      aggregateId: String(envelope.aggregateId),
      replayId: typeof envelope.replayId === 'string' ? envelope.replayId : undefined,
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
 * Receives and deletes a queue's messages with `parallel` receivers, from
 * the start of a run (as consumers would, and so that the queue stays
 * shallow) until {@link finish} finds it empty. Messages are recorded in the
 * order their ReceiveMessage returned; on a FIFO queue a group's next
 * messages are only handed out once the previous ones are deleted, so that
 * order is the group's order.
 */
export class QueueReceiver {
  readonly messages: Received[] = [];
  unparsable = 0;
  errors = 0;
  private finishing = false;
  private emptyAt: number | undefined;
  private done = false;
  private readonly loops: Promise<void>[];

  constructor(
    private readonly sqs: SQSClient,
    private readonly queueUrl: string,
    parallel: number,
  ) {
    this.loops = Array.from({ length: parallel }, () => this.loop());
  }

  private async loop(): Promise<void> {
    let empties = 0;
    while (!this.done) {
      try {
        const { Messages = [] } = await this.sqs.send(
          new ReceiveMessageCommand({
            QueueUrl: this.queueUrl,
            MaxNumberOfMessages: 10,
            WaitTimeSeconds: 1,
            VisibilityTimeout: 120,
          }),
          { abortSignal: AbortSignal.timeout(30_000) },
        );
        for (const m of Messages) {
          const parsed = parseBody(m.Body ?? '');
          if (parsed) this.messages.push(parsed);
          else this.unparsable++;
        }
        if (Messages.length > 0) {
          empties = 0;
          await this.sqs.send(
            new DeleteMessageBatchCommand({
              QueueUrl: this.queueUrl,
              Entries: Messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
            }),
            { abortSignal: AbortSignal.timeout(30_000) },
          );
        } else if (this.finishing && ++empties >= 2 && (await depth(this.sqs, this.queueUrl)) === 0) {
          this.emptyAt ??= Date.now();
          this.done = true;
        }
      } catch {
        // The emulator is paused or restarting; a message not deleted comes back (a duplicate).
        this.errors++;
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
  }

  /** Receives until the queue is empty (or `timeoutMs` passed), then stops. */
  async finish(timeoutMs: number): Promise<{ complete: boolean }> {
    this.finishing = true;
    const timer = setTimeout(() => {
      this.done = true;
    }, timeoutMs);
    await Promise.all(this.loops);
    clearTimeout(timer);
    return { complete: this.emptyAt !== undefined };
  }

  /** Stops at once (on errors). */
  async abort(): Promise<void> {
    this.done = true;
    await Promise.all(this.loops);
  }
}
