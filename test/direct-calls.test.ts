import { randomUUID } from 'node:crypto';
import http from 'node:http';
import {
  CreateEventBusCommand,
  EventBridgeClient,
  PutRuleCommand,
  PutTargetsCommand,
} from '@aws-sdk/client-eventbridge';
import {
  CreateAccessKeyCommand,
  CreateUserCommand,
  IAMClient,
  PutUserPolicyCommand,
} from '@aws-sdk/client-iam';
import { DeleteQueueCommand, SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { OutboxEvent } from '../lib/outbox/types.js';
import { classifyCallError } from '../lib/publish/aws-errors.js';
import { DirectCallError, useSignerLoader } from '../lib/publish/direct-calls.js';
import { EventBridgeTransport } from '../lib/publish/eventbridge-transport.js';
import { SigV4Signer } from '../lib/publish/sigv4.js';
import { SqsTransport } from '../lib/publish/sqs-transport.js';
import { type StackEmulator, startStackEmulator } from '../scripts/local/aws-emulator.js';
import { FaultProxy } from '../scripts/local/fault-proxy.js';
import { awsClients, createQueue, drainQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { eventRows, insertEvents } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

/**
 * Direct calls (lib/publish/direct-calls.ts): after a target's first call
 * through the SDK, SendMessageBatch and PutEvents go out signed by the SDK's
 * signer and sent by the client's HTTP handler, without its middleware.
 */

const db = useTestDatabase();
const aws = awsClients();

/** A client whose `send` is counted: the calls that went through the SDK. */
function counted<C extends { send: (...args: never[]) => Promise<unknown>; config: unknown }>(client: C) {
  const counter = { sdkSends: 0 };
  const wrapped = {
    config: client.config,
    send: (...args: Parameters<C['send']>) => {
      counter.sdkSends++;
      return client.send(...args);
    },
  };
  return { client: wrapped as unknown as C, counter };
}

function event(i: number, overrides: Partial<OutboxEvent> = {}): OutboxEvent {
  const payload = { i, note: 'x'.repeat(50) };
  return {
    id: randomUUID(),
    seq: String(i + 1),
    aggregateType: 'order',
    aggregateId: `order-${i % 3}`,
    eventType: 'order.created',
    payload,
    payloadJson: JSON.stringify(payload),
    headers: { 'x-test': 'yes' },
    createdAt: new Date(),
    attempts: 1,
    deliveredTargets: [],
    ...overrides,
  };
}

describe('direct calls through the relay', () => {
  let standard: { url: string; arn: string };
  let fifo: { url: string; arn: string };
  let busQueue: { url: string; arn: string };
  let bus: string;

  beforeAll(async () => {
    standard = await createQueue(aws.sqs, uniqueName('direct-std'));
    fifo = await createQueue(aws.sqs, `${uniqueName('direct-fifo')}.fifo`);
    busQueue = await createQueue(aws.sqs, uniqueName('direct-bus-target'));
    bus = uniqueName('direct-bus');
    await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
    const rule = uniqueName('direct-rule');
    await aws.eventBridge.send(
      new PutRuleCommand({
        Name: rule,
        EventBusName: bus,
        EventPattern: JSON.stringify({ source: ['outbox'] }),
      }),
    );
    await aws.eventBridge.send(
      new PutTargetsCommand({ Rule: rule, EventBusName: bus, Targets: [{ Id: 'q', Arn: busQueue.arn }] }),
    );
  });

  it('sends one call per target through the SDK, the rest directly, and every message arrives whole', async () => {
    const pool = db.pool;
    const sqs = counted(aws.sqs);
    const eventBridge = counted(aws.eventBridge);
    let calls = 0;
    const ids = await insertEvents(pool, 120, (i) => ({
      aggregateId: `order-${i % 7}`,
      payload: { i, big: 12345678901234567890n.toString(), price: '10.10' },
      headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    }));
    const { relay } = emulatorRelay(
      pool,
      { sqs: sqs.client, eventBridge: eventBridge.client },
      [
        {
          match: 'order.*',
          targets: [
            { type: 'sqs', queueUrl: standard.url },
            { type: 'sqs', queueUrl: fifo.url },
            { type: 'eventbridge', busName: bus },
          ],
        },
      ],
      { batchSize: 40, workers: 1 },
      { onCall: () => calls++, directCalls: true },
    );
    const summary = await drainUntilIdle(relay);
    expect(summary.published).toBe(120);
    // 120 events in claims of 40: 4 calls of 10 per claim and target, 36 in all.
    expect(calls).toBe(36);
    // Each target's calls go through the SDK until its first one has
    // answered (the first claim's 12 calls at most, 4 in flight); every
    // call of the later claims is direct.
    const sdkSends = sqs.counter.sdkSends + eventBridge.counter.sdkSends;
    expect(sqs.counter.sdkSends).toBeGreaterThanOrEqual(2);
    expect(eventBridge.counter.sdkSends).toBeGreaterThanOrEqual(1);
    expect(sdkSends).toBeLessThanOrEqual(12);

    const received = await receiveAll(aws.sqs, standard.url, 120, 30_000);
    expect(new Set(received.map((m) => JSON.parse(m.Body as string).id))).toEqual(new Set(ids));
    for (const m of received) {
      const body = JSON.parse(m.Body as string);
      expect(m.MessageAttributes?.eventId?.StringValue).toBe(body.id);
      expect(m.MessageAttributes?.eventType?.StringValue).toBe('order.created');
      expect(m.MessageAttributes?.traceparent?.StringValue).toBe(
        '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      );
      expect(m.Body).toContain('"big":"12345678901234567890","price":"10.10"');
    }
    // FIFO: each aggregate in its own group, each event once.
    const fromFifo = await drainQueue(aws.sqs, fifo.url, 120);
    expect(new Set(fromFifo.map((m) => JSON.parse(m.Body as string).id))).toEqual(new Set(ids));
    for (const m of fromFifo) {
      const body = JSON.parse(m.Body as string);
      expect(m.Attributes?.MessageGroupId).toBe(`order:${body.aggregateId}`);
      expect(m.Attributes?.MessageDeduplicationId).toBe(body.id);
    }
    const fromBus = await receiveAll(aws.sqs, busQueue.url, 120, 30_000);
    expect(new Set(fromBus.map((m) => JSON.parse(m.Body as string).detail.id))).toEqual(new Set(ids));
  });

  it('answers a refused call with the error the SDK would have thrown', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('direct-gone'));
    const direct = new SqsTransport({ client: aws.sqs, queueUrl: queue.url, directCalls: true });
    const viaSdk = new SqsTransport({ client: aws.sqs, queueUrl: queue.url });
    const first = await direct.send([event(0)]);
    expect(first.get([...first.keys()][0] as string)).toEqual({ ok: true });
    await aws.sqs.send(new DeleteQueueCommand({ QueueUrl: queue.url }));
    const [a, b] = [event(1), event(2)];
    const directResult = (await direct.send([a])).get(a.id);
    const sdkResult = (await viaSdk.send([b])).get(b.id);
    expect(directResult?.ok).toBe(false);
    expect(sdkResult?.ok).toBe(false);
    // The same classification: whose fault, retried or not, and the code.
    const pick = (r: typeof directResult) =>
      r && !r.ok ? { retryable: r.retryable, environment: r.environment, code: r.code } : r;
    expect(pick(directResult)).toEqual(pick(sdkResult));
    expect(pick(directResult)).toMatchObject({ retryable: true, environment: true });
  });
});

describe('direct calls without the SDK signer (a pnpm layout, a bundle without @smithy/signature-v4)', () => {
  let queue: { url: string; arn: string };
  let busQueue: { url: string; arn: string };
  let bus: string;
  let restore: () => void;
  const warnings: Error[] = [];
  const onWarning = (warning: Error) => {
    if ((warning as { code?: string }).code === 'OUTBOX_DIRECT_CALLS_OFF') warnings.push(warning);
  };

  beforeAll(async () => {
    queue = await createQueue(aws.sqs, uniqueName('direct-nosigner'));
    busQueue = await createQueue(aws.sqs, uniqueName('direct-nosigner-bus-target'));
    bus = uniqueName('direct-nosigner-bus');
    await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
    const rule = uniqueName('direct-nosigner-rule');
    await aws.eventBridge.send(
      new PutRuleCommand({
        Name: rule,
        EventBusName: bus,
        EventPattern: JSON.stringify({ source: ['outbox'] }),
      }),
    );
    await aws.eventBridge.send(
      new PutTargetsCommand({ Rule: rule, EventBusName: bus, Targets: [{ Id: 'q', Arn: busQueue.arn }] }),
    );
    // The import as it fails where the package cannot be resolved.
    restore = useSignerLoader(async () => {
      throw Object.assign(
        new Error("Cannot find package '@smithy/signature-v4' imported from /var/task/index.mjs"),
        { code: 'ERR_MODULE_NOT_FOUND' },
      );
    });
    process.on('warning', onWarning);
  });
  afterAll(() => {
    restore?.();
    process.off('warning', onWarning);
  });

  it('falls back to the SDK for good: every event published once, none failed, one warning however many batches', async () => {
    const sqs = counted(aws.sqs);
    const eventBridge = counted(aws.eventBridge);
    const drain = async (count: number) => {
      let calls = 0;
      const ids = await insertEvents(db.pool, count);
      // A publisher of its own each time: new callers, in the same process.
      const { relay } = emulatorRelay(
        db.pool,
        { sqs: sqs.client, eventBridge: eventBridge.client },
        [
          {
            match: 'order.*',
            targets: [
              { type: 'sqs', queueUrl: queue.url },
              { type: 'eventbridge', busName: bus },
            ],
          },
        ],
        { batchSize: 10, workers: 1 },
        { onCall: () => calls++, directCalls: true },
      );
      const summary = await drainUntilIdle(relay);
      return { ids, calls, summary };
    };

    const first = await drain(45);
    const second = await drain(25);
    const ids = [...first.ids, ...second.ids];
    for (const { summary, ids: drained } of [first, second]) {
      expect(summary).toMatchObject({ published: drained.length, retried: 0, deadLettered: 0 });
    }
    const mine = new Set(ids);
    const rows = (await eventRows(db.pool)).filter((row) => mine.has(row.id));
    expect(rows).toHaveLength(70);
    for (const row of rows) {
      expect(row).toMatchObject({ last_error: null, dead_lettered_at: null, retry_after: null });
      expect(row.processed_at).not.toBeNull();
    }
    // Claims of 10: 5 + 3 claims, one call each to the queue and the bus,
    // and every call went through the SDK: none was direct.
    expect(first.calls + second.calls).toBe(16);
    expect(sqs.counter.sdkSends + eventBridge.counter.sdkSends).toBe(16);

    // Exactly once to each target: all arrived, and nothing more comes.
    const arrived = async (url: string, read: (body: Record<string, unknown>) => unknown) => {
      const messages = await drainQueue(aws.sqs, url, ids.length);
      messages.push(...(await receiveAll(aws.sqs, url, 1, 2_000)));
      return messages.map((m) => read(JSON.parse(m.Body as string)) as string).sort();
    };
    expect(await arrived(queue.url, (body) => body.id)).toEqual([...ids].sort());
    expect(await arrived(busQueue.url, (body) => (body.detail as { id: string }).id)).toEqual(
      [...ids].sort(),
    );

    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.message).toMatch(
      /direct calls are off .*@smithy\/signature-v4 is not installed.*goes through the SDK/,
    );
  });
});

describe('direct calls: retries and errors at the HTTP level', () => {
  let proxy: FaultProxy;
  let eventBridge: EventBridgeClient;
  let bus: string;

  beforeAll(async () => {
    proxy = await FaultProxy.start(0);
    proxy.forwardTo(aws.endpoint);
    eventBridge = new EventBridgeClient({
      endpoint: proxy.endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      maxAttempts: 2,
    });
    bus = uniqueName('direct-retry-bus');
    await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
  });
  afterAll(() => proxy.stop());

  it('retries a 503 once (maxAttempts 2) and gives up on the second', async () => {
    const transport = new EventBridgeTransport({
      client: eventBridge,
      busName: bus,
      source: 'outbox',
      directCalls: true,
    });
    const e0 = event(0);
    expect((await transport.send([e0])).get(e0.id)).toEqual({ ok: true }); // through the SDK
    const unavailable = {
      status: 503,
      body: '{"__type":"ServiceUnavailableException","message":"try later"}',
    };
    proxy.answerNext(unavailable);
    const before = proxy.forwarded;
    const e1 = event(1);
    expect((await transport.send([e1])).get(e1.id)).toEqual({ ok: true });
    expect(proxy.forwarded - before).toBe(2); // the 503, then the retry
    proxy.answerNext(unavailable, unavailable);
    const e2 = event(2);
    const failed = (await transport.send([e2])).get(e2.id);
    expect(failed).toMatchObject({
      ok: false,
      retryable: true,
      environment: true,
      code: 'ServiceUnavailableException',
    });
  });

  it('does not retry what the event is at fault for, and names the code', async () => {
    const transport = new EventBridgeTransport({
      client: eventBridge,
      busName: bus,
      source: 'outbox',
      directCalls: true,
    });
    await transport.send([event(0)]);
    proxy.answerNext({ status: 400, body: '{"__type":"ValidationException","message":"bad detail"}' });
    const before = proxy.forwarded;
    const e1 = event(1);
    const result = (await transport.send([e1])).get(e1.id);
    expect(proxy.forwarded - before).toBe(1);
    expect(result).toMatchObject({ ok: false, retryable: false, code: 'ValidationException' });
    expect(result?.ok === false && result.error).toContain('bad detail');
  });

  it('checks the digest SQS returns for each body, as the SDK does', async () => {
    const sqs = new SQSClient({
      endpoint: proxy.endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      maxAttempts: 1,
    });
    const queue = await createQueue(aws.sqs, uniqueName('direct-md5'));
    const transport = new SqsTransport({ client: sqs, queueUrl: queue.url, directCalls: true });
    const e0 = event(0);
    expect((await transport.send([e0])).get(e0.id)).toEqual({ ok: true });
    // An answer whose digest is not that of the body sent.
    proxy.answerNext({
      status: 200,
      body: '{"Successful":[{"Id":"e0","MessageId":"m-1","MD5OfMessageBody":"00000000000000000000000000000000"}],"Failed":[]}',
    });
    const e1 = event(1);
    const result = (await transport.send([e1])).get(e1.id);
    expect(result).toMatchObject({ ok: false, retryable: true });
    expect(result?.ok === false && result.error).toContain('Invalid MD5 checksum');
    const e2 = event(2);
    expect((await transport.send([e2])).get(e2.id)).toEqual({ ok: true });
  });

  it("corrects the client's clock offset from a skewed answer's Date and signs again, as the SDK does", async () => {
    const transport = new EventBridgeTransport({
      client: eventBridge,
      busName: bus,
      source: 'outbox',
      directCalls: true,
    });
    await transport.send([event(0)]);
    const config = eventBridge.config as { systemClockOffset?: number };
    const before = config.systemClockOffset ?? 0;
    // The service's clock is 10 minutes ahead of ours.
    proxy.answerNext({
      status: 403,
      body: '{"__type":"InvalidSignatureException","message":"Signature expired"}',
      headers: { date: new Date(Date.now() + 600_000).toUTCString() },
    });
    const forwarded = proxy.forwarded;
    const e1 = event(1);
    try {
      expect((await transport.send([e1])).get(e1.id)).toEqual({ ok: true });
      expect(proxy.forwarded - forwarded).toBe(2); // refused, then signed again
      expect(config.systemClockOffset).toBeGreaterThan(590_000);
      expect(config.systemClockOffset).toBeLessThan(610_000);
    } finally {
      config.systemClockOffset = before;
    }
  });

  it('takes an error page that is not JSON by its status', async () => {
    const transport = new EventBridgeTransport({
      client: eventBridge,
      busName: bus,
      source: 'outbox',
      directCalls: true,
    });
    await transport.send([event(0)]);
    proxy.answerNext(
      { status: 502, body: '<html>bad gateway</html>' },
      { status: 502, body: '<html>bad gateway</html>' },
    );
    const e1 = event(1);
    const result = (await transport.send([e1])).get(e1.id);
    expect(result).toMatchObject({ ok: false, retryable: true, environment: true, code: 'Http502' });
    const error = new DirectCallError('Http502', 'HTTP 502', 502);
    expect(classifyCallError(error)).toMatchObject({ kind: 'server' });
  });
});

describe("direct calls on the client's own connections (plain HTTP)", () => {
  let proxy: FaultProxy;
  let bus: string;

  beforeAll(async () => {
    proxy = await FaultProxy.start(0);
    proxy.forwardTo(aws.endpoint);
    bus = uniqueName('direct-plain-bus');
    await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
  });
  afterAll(() => proxy.stop());

  /** A client whose HTTP agent counts the requests it carries. */
  function clientWith(requestHandler: Record<string, unknown> = {}) {
    const agent = new http.Agent({ keepAlive: true });
    const counter = { requests: 0 };
    // Agent#addRequest (undocumented, stable since Node 0.x): every request the agent carries.
    const counted = agent as unknown as { addRequest: (...args: unknown[]) => void };
    const addRequest = counted.addRequest.bind(agent);
    counted.addRequest = (...args) => {
      counter.requests++;
      addRequest(...args);
    };
    const client = new EventBridgeClient({
      endpoint: proxy.endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      maxAttempts: 2,
      requestHandler: { httpAgent: agent, ...requestHandler },
    });
    const transport = new EventBridgeTransport({ client, busName: bus, source: 'outbox', directCalls: true });
    return { transport, counter, close: () => agent.destroy() };
  }

  it("sends every call on the client's agent (a proxy agent given to the client carries direct calls too)", async () => {
    const { transport, counter, close } = clientWith();
    try {
      for (let i = 0; i < 3; i++) {
        const e = event(i);
        expect((await transport.send([e])).get(e.id)).toEqual({ ok: true });
      }
      // One call through the SDK, two direct: all three on the agent.
      expect(counter.requests).toBe(3);
    } finally {
      close();
    }
  });

  it("a call that gets no answer fails by the client's requestTimeout, is retried, and the connections keep working", async () => {
    // Long enough for a loaded emulator to answer the calls that get an answer.
    const { transport, close } = clientWith({ requestTimeout: 1_500, throwOnRequestTimeout: true });
    try {
      await transport.send([event(0)]); // through the SDK
      proxy.answerNext({ hang: true }, { hang: true });
      const before = proxy.forwarded;
      const started = Date.now();
      const e1 = event(1);
      const result = (await transport.send([e1])).get(e1.id);
      expect(result).toMatchObject({ ok: false, retryable: true, environment: true, code: 'TimeoutError' });
      expect(proxy.forwarded - before).toBe(2); // the call and its retry, both unanswered
      expect(Date.now() - started).toBeLessThan(6_000);
      const e2 = event(2);
      expect((await transport.send([e2])).get(e2.id)).toEqual({ ok: true });
    } finally {
      close();
    }
  });

  it('an answer cut short is a network failure, and the retry gets the events through', async () => {
    const { transport, close } = clientWith();
    try {
      await transport.send([event(0)]);
      proxy.answerNext({ cut: true });
      const before = proxy.forwarded;
      const e1 = event(1);
      expect((await transport.send([e1])).get(e1.id)).toEqual({ ok: true });
      expect(proxy.forwarded - before).toBe(2);
      proxy.answerNext({ cut: true }, { cut: true });
      const e2 = event(2);
      expect((await transport.send([e2])).get(e2.id)).toMatchObject({
        ok: false,
        retryable: true,
        environment: true,
        code: 'ECONNRESET',
      });
    } finally {
      close();
    }
  });

  it("the relay's deadline ends a call that waits for an answer, long before the client's own timeout", async () => {
    const { transport, close } = clientWith({ requestTimeout: 30_000, throwOnRequestTimeout: true });
    try {
      await transport.send([event(0)]);
      proxy.answerNext({ hang: true });
      const started = Date.now();
      const e1 = event(1);
      const result = (await transport.send([e1], { signal: AbortSignal.timeout(300) })).get(e1.id);
      expect(result).toMatchObject({ ok: false, retryable: true });
      expect(Date.now() - started).toBeLessThan(2_000);
    } finally {
      close();
    }
  });
});

describe('direct calls against an emulator that checks signatures (MiniStack, AUTH=true)', () => {
  let emulator: StackEmulator;
  let queueUrl: string;
  let user: { accessKeyId: string; secretAccessKey: string };

  beforeAll(async () => {
    emulator = await startStackEmulator({ auth: true });
    const root = {
      endpoint: emulator.endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    };
    const sqs = new SQSClient(root);
    queueUrl = (await createQueue(sqs, uniqueName('direct-signed'))).url;
    const iam = new IAMClient(root);
    const name = uniqueName('direct-user');
    await iam.send(new CreateUserCommand({ UserName: name }));
    await iam.send(
      new PutUserPolicyCommand({
        UserName: name,
        PolicyName: 'send',
        PolicyDocument: JSON.stringify({
          Version: '2012-10-17',
          Statement: [
            { Effect: 'Allow', Action: ['sqs:SendMessage', 'sqs:SendMessageBatch'], Resource: '*' },
          ],
        }),
      }),
    );
    const key = await iam.send(new CreateAccessKeyCommand({ UserName: name }));
    user = {
      accessKeyId: key.AccessKey?.AccessKeyId as string,
      secretAccessKey: key.AccessKey?.SecretAccessKey as string,
    };
  }, 120_000);
  afterAll(() => emulator?.stop());

  it('is accepted when signed with the key, refused when the secret is wrong', async () => {
    // Credentials read at every call (they expire within the SDK's refresh window).
    let secret = user.secretAccessKey;
    const credentials = async () => ({
      accessKeyId: user.accessKeyId,
      secretAccessKey: secret,
      expiration: new Date(Date.now() + 60_000),
    });
    const sqs = counted(
      new SQSClient({ endpoint: emulator.endpoint, region: 'us-east-1', credentials, maxAttempts: 1 }),
    );
    const transport = new SqsTransport({ client: sqs.client, queueUrl, directCalls: true });
    // Watched, not replaced: the signatures the emulator checks are sigv4.ts's own.
    const signs = vi.spyOn(SigV4Signer.prototype, 'sign');
    for (let i = 0; i < 3; i++) {
      const e = event(i);
      expect((await transport.send([e])).get(e.id)).toEqual({ ok: true });
    }
    expect(sqs.counter.sdkSends).toBe(1);
    // Once to compare with the SDK's signer, then the two direct calls.
    expect(signs).toHaveBeenCalledTimes(3);
    signs.mockRestore();
    secret = `${user.secretAccessKey.slice(0, -1)}x`;
    const refused = event(3);
    const result = (await transport.send([refused])).get(refused.id);
    expect(sqs.counter.sdkSends).toBe(1); // still direct
    expect(result).toMatchObject({ ok: false, environment: true });
    expect(result?.ok === false && result.error).toMatch(/signature/i);
    secret = user.secretAccessKey;
    const again = event(4);
    expect((await transport.send([again])).get(again.id)).toEqual({ ok: true });
    const bodies = (
      await receiveAll(
        new SQSClient({
          endpoint: emulator.endpoint,
          region: 'us-east-1',
          credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
        }),
        queueUrl,
        4,
      )
    ).map((m) => JSON.parse(m.Body as string).payload.i);
    expect(bodies.sort()).toEqual([0, 1, 2, 4]);
  });
});
