import {
  CreateEventBusCommand,
  type EventBridgeClient,
  PutRuleCommand,
  PutTargetsCommand,
} from '@aws-sdk/client-eventbridge';
import { CreateBucketCommand, type S3Client } from '@aws-sdk/client-s3';
import { CreateQueueCommand, GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { RouteConfig } from '../../lib/publish/routes.js';
import { BUS_EVENT_TYPE } from './producer.js';

/** The destinations of one chaos run. */
export interface ChaosTargets {
  /** The relay's queue: every event goes here (FIFO in ordered mode). */
  queueUrl: string;
  busName: string;
  /** Where the bus's rule delivers `order.shipped` events. */
  busQueueUrl: string;
  /** The relay's large-payload bucket (OUTBOX_LARGE_PAYLOAD_BUCKET), read by the consumer. */
  bucket: string;
  routes: RouteConfig[];
}

async function queue(sqs: SQSClient, name: string, attributes: Record<string, string> = {}) {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['QueueArn'] }),
  );
  return { url: QueueUrl as string, arn: Attributes?.QueueArn as string };
}

/**
 * Creates fresh queues, a bus and its rule for one run (names carry the run
 * id, so nothing left from an earlier run is received). Like serverless.yml:
 * a standard or FIFO queue (`DeduplicationScope: messageGroup`, dedupe by
 * event id) and a bus whose rule feeds a queue. `order.shipped` goes to the
 * queue and the bus, everything else to the queue only, so an outage of the
 * bus leaves the other events free to flow. No route matches the poison
 * type (`chaos.unroutable`): those events are dead-lettered as NoRoute. A
 * bucket takes the payloads too large for a message (the claim check).
 */
export async function createChaosTargets(
  sqs: SQSClient,
  eventBridge: EventBridgeClient,
  s3: S3Client,
  runId: string,
  fifo: boolean,
): Promise<ChaosTargets> {
  const bucket = `chaos-${runId}-payloads`;
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  const main = fifo
    ? await queue(sqs, `chaos-${runId}-events.fifo`, {
        FifoQueue: 'true',
        ContentBasedDeduplication: 'false',
        DeduplicationScope: 'messageGroup',
        FifoThroughputLimit: 'perMessageGroupId',
      })
    : await queue(sqs, `chaos-${runId}-events`);
  const busQueue = await queue(sqs, `chaos-${runId}-bus-events`);
  const busName = `chaos-${runId}-bus`;
  await eventBridge.send(new CreateEventBusCommand({ Name: busName }));
  await eventBridge.send(
    new PutRuleCommand({
      Name: `chaos-${runId}-rule`,
      EventBusName: busName,
      EventPattern: JSON.stringify({ source: ['outbox'] }),
    }),
  );
  await eventBridge.send(
    new PutTargetsCommand({
      Rule: `chaos-${runId}-rule`,
      EventBusName: busName,
      Targets: [{ Id: 'bus-queue', Arn: busQueue.arn }],
    }),
  );
  const queueTarget = { type: 'sqs' as const, queueUrl: main.url };
  return {
    queueUrl: main.url,
    busName,
    busQueueUrl: busQueue.url,
    bucket,
    routes: [
      { match: BUS_EVENT_TYPE, targets: [queueTarget, { type: 'eventbridge', busName }] },
      { match: 'order.*', targets: [queueTarget] },
    ],
  };
}
