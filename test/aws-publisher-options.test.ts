import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../lib/errors.js';
import type { OutboxEvent } from '../lib/outbox/types.js';
import { type AwsPublisherOptions, createAwsPublisher } from '../lib/publish/router.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';

const aws = awsClients();

const event = (eventType: string): OutboxEvent => ({
  id: randomUUID(),
  seq: '1',
  aggregateType: 'order',
  aggregateId: 'o-1',
  eventType,
  payload: { total: 10 },
  payloadJson: '{"total": 10}',
  headers: {},
  createdAt: new Date(),
  attempts: 1,
  deliveredTargets: [],
});

const sqsRoute = [{ match: 'order.*', targets: [{ type: 'sqs' as const, queueUrl: 'http://localhost/q' }] }];
const busRoute = [{ match: 'order.*', targets: [{ type: 'eventbridge' as const, busName: 'orders' }] }];

/** The ConfigError createAwsPublisher throws for these options. */
function configError(options: AwsPublisherOptions): ConfigError {
  try {
    createAwsPublisher(options);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('createAwsPublisher options', () => {
  it('SQS-only routes need only an SQS client: source and concurrency are defaulted', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('publisher-defaults'));
    const publisher = createAwsPublisher({
      routes: [{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
      sqs: aws.sqs,
    });
    const sent = event('order.created');
    const outcomes = await publisher.publish([sent]);
    expect(outcomes).toEqual([{ eventId: sent.id, ok: true, delivered: [`sqs:${queue.url}`] }]);
    const [message] = await drainQueue(aws.sqs, queue.url, 1);
    expect(JSON.parse(message?.Body ?? '{}')).toMatchObject({ id: sent.id, payload: { total: 10 } });
  });

  it('EventBridge routes need only an EventBridge client', () => {
    expect(() => createAwsPublisher({ routes: busRoute, eventBridge: aws.eventBridge })).not.toThrow();
  });

  it('names the missing client of a target type', () => {
    const noBus = configError({ routes: busRoute, sqs: aws.sqs });
    expect(noBus.variable).toBe('eventBridge');
    expect(noBus.message).toMatch(
      /EventBridge target eventbridge:orders: pass an EventBridgeClient as eventBridge/,
    );
    const noQueue = configError({ routes: sqsRoute, eventBridge: aws.eventBridge });
    expect(noQueue.variable).toBe('sqs');
  });

  it('refuses a bad concurrency or source with a ConfigError, not a crash in p-limit', () => {
    for (const concurrency of [0, -1, 1.5, Number.NaN, 1000, '4' as unknown as number]) {
      expect(configError({ routes: sqsRoute, sqs: aws.sqs, concurrency }).variable).toBe('concurrency');
    }
    expect(configError({ routes: busRoute, eventBridge: aws.eventBridge, source: '' }).variable).toBe(
      'source',
    );
  });

  it('refuses malformed routes and conflicting settings for one destination', () => {
    expect(configError({ routes: [], sqs: aws.sqs }).variable).toBe('routes');
    const badUrl = [{ match: 'a', targets: [{ type: 'sqs' as const, queueUrl: 'not a url' }] }];
    expect(configError({ routes: badUrl, sqs: aws.sqs }).variable).toBe('routes.0.targets.0.queueUrl');
    const conflict = [
      {
        match: 'a',
        targets: [{ type: 'sqs' as const, queueUrl: 'http://localhost/q', maxMessageBytes: 2048 }],
      },
      { match: 'b', targets: [{ type: 'sqs' as const, queueUrl: 'http://localhost/q' }] },
    ];
    expect(configError({ routes: conflict, sqs: aws.sqs }).message).toMatch(/same destination/);
  });

  it('refuses largePayloads without a bucket or an S3 client', () => {
    const noClient = { bucket: 'b' } as unknown as AwsPublisherOptions['largePayloads'];
    expect(configError({ routes: sqsRoute, sqs: aws.sqs, largePayloads: noClient }).variable).toBe(
      'largePayloads.s3',
    );
    expect(
      configError({ routes: sqsRoute, sqs: aws.sqs, largePayloads: { bucket: '', s3: aws.s3 } }).variable,
    ).toBe('largePayloads.bucket');
  });
});
