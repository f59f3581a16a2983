import {
  CreateEventBusCommand,
  PutEventsCommand,
  PutRuleCommand,
  PutTargetsCommand,
} from '@aws-sdk/client-eventbridge';
import { describe, expect, it } from 'vitest';
import { awsClients, createQueue, receiveAll, uniqueName } from './support/aws.js';

describe('AWS API emulator harness', () => {
  it('routes an event put on a bus through a rule to an SQS queue', async () => {
    const { sqs, eventBridge } = awsClients();
    const queue = await createQueue(sqs, uniqueName('smoke'));
    const bus = uniqueName('smoke-bus');
    await eventBridge.send(new CreateEventBusCommand({ Name: bus }));
    const ruleName = uniqueName('smoke-rule');
    await eventBridge.send(
      new PutRuleCommand({
        Name: ruleName,
        EventBusName: bus,
        EventPattern: JSON.stringify({ source: ['outbox.smoke'], 'detail-type': ['order.created'] }),
      }),
    );
    await eventBridge.send(
      new PutTargetsCommand({
        Rule: ruleName,
        EventBusName: bus,
        Targets: [{ Id: 'queue', Arn: queue.arn }],
      }),
    );
    const put = await eventBridge.send(
      new PutEventsCommand({
        Entries: [
          {
            EventBusName: bus,
            Source: 'outbox.smoke',
            DetailType: 'order.created',
            Detail: JSON.stringify({ orderId: 'o-1' }),
          },
          { EventBusName: bus, Source: 'someone.else', DetailType: 'order.created', Detail: '{}' },
        ],
      }),
    );
    expect(put.FailedEntryCount).toBe(0);
    const messages = await receiveAll(sqs, queue.url, 1, 5000);
    expect(messages).toHaveLength(1);
    const body = JSON.parse(messages[0]?.Body as string);
    expect(body).toMatchObject({
      source: 'outbox.smoke',
      'detail-type': 'order.created',
      detail: { orderId: 'o-1' },
    });
    // The event from the other source matched no rule and was not delivered.
    expect(await receiveAll(sqs, queue.url, 1, 1500)).toHaveLength(0);
  });
});
