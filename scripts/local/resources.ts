import {
  CreateEventBusCommand,
  type EventBridgeClient,
  PutRuleCommand,
  PutTargetsCommand,
} from '@aws-sdk/client-eventbridge';
import { CreateQueueCommand, GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';

/** The same names as localstack/init/ready.d/01-resources.sh. */
export const LOCAL_NAMES = {
  eventsQueue: 'outbox-events',
  bus: 'outbox-bus',
  consumerQueue: 'outbox-consumer',
  consumerDlq: 'outbox-consumer-dlq',
  rule: 'outbox-order-events',
};

export interface LocalResources {
  eventsQueueUrl: string;
  busName: string;
  consumerQueueUrl: string;
  consumerDlqUrl: string;
}

async function queue(sqs: SQSClient, name: string, attributes: Record<string, string> = {}) {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['QueueArn'] }),
  );
  return { url: QueueUrl as string, arn: Attributes?.QueueArn as string };
}

/**
 * Creates (idempotently) what serverless.yml defines, in the emulator: the
 * relay's queue, the bus, the consumer queue with its dead-letter queue, and
 * the rule that routes order events from the bus to the consumer queue.
 */
export async function ensureLocalResources(
  sqs: SQSClient,
  eventBridge: EventBridgeClient,
): Promise<LocalResources> {
  const events = await queue(sqs, LOCAL_NAMES.eventsQueue);
  const dlq = await queue(sqs, LOCAL_NAMES.consumerDlq);
  const consumer = await queue(sqs, LOCAL_NAMES.consumerQueue, {
    RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlq.arn, maxReceiveCount: '5' }),
    VisibilityTimeout: '30',
  });
  await eventBridge.send(new CreateEventBusCommand({ Name: LOCAL_NAMES.bus })).catch((error: Error) => {
    if (error.name !== 'ResourceAlreadyExistsException') throw error;
  });
  await eventBridge.send(
    new PutRuleCommand({
      Name: LOCAL_NAMES.rule,
      EventBusName: LOCAL_NAMES.bus,
      EventPattern: JSON.stringify({ source: ['outbox'], 'detail-type': [{ prefix: 'order.' }] }),
    }),
  );
  await eventBridge.send(
    new PutTargetsCommand({
      Rule: LOCAL_NAMES.rule,
      EventBusName: LOCAL_NAMES.bus,
      Targets: [{ Id: 'consumer-queue', Arn: consumer.arn }],
    }),
  );
  return {
    eventsQueueUrl: events.url,
    busName: LOCAL_NAMES.bus,
    consumerQueueUrl: consumer.url,
    consumerDlqUrl: dlq.url,
  };
}
