import { describe, expect, it } from 'vitest';
import type { OutboxEvent } from '../../lib/outbox/types.js';
import { classifyCallError, classifyEntryError } from '../../lib/publish/aws-errors.js';
import { chunkBySize, sendBatchOrSplit } from '../../lib/publish/batching.js';
import { CircuitBreaker } from '../../lib/publish/circuit-breaker.js';
import {
  compactJson,
  compactJsonBuffer,
  compactJsonBytes,
  messageGroupId,
  publishedPayloadBytes,
} from '../../lib/publish/messages.js';
import { RoutingPublisher } from '../../lib/publish/router.js';
import { RouteTable } from '../../lib/publish/routes.js';
import type { TargetResult, Transport } from '../../lib/publish/types.js';
import { backoffDelay } from '../../lib/relay/backoff.js';
import { resolveRelayOptions } from '../../lib/relay/options.js';

describe('backoffDelay', () => {
  const policy = { baseMs: 1000, factor: 2, maxMs: 10_000 };
  it('grows exponentially with equal jitter and stops at the cap', () => {
    expect([1, 2, 3, 4, 5, 6].map((a) => backoffDelay(a, policy, () => 0))).toEqual([
      500, 1000, 2000, 4000, 5000, 5000,
    ]);
    expect([1, 2, 3, 4, 5, 6].map((a) => backoffDelay(a, policy, () => 1))).toEqual([
      1000, 2000, 4000, 8000, 10000, 10000,
    ]);
  });
});

describe('chunkBySize', () => {
  it('respects both the entry and the byte limit, keeping order', () => {
    const sizes = [5, 5, 5, 90, 10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];
    const chunks = chunkBySize(sizes, (s) => s, 10, 100);
    expect(chunks).toEqual([[5, 5, 5], [90, 10], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [1]]);
    expect(chunks.flat()).toEqual(sizes);
  });
});

describe('RouteTable', () => {
  const table = new RouteTable([
    { match: 'order.created', targets: [{ type: 'sqs', queueUrl: 'https://q/created' }] },
    {
      match: ['order.*', 'invoice.*'],
      targets: [
        { type: 'sqs', queueUrl: 'https://q/all' },
        { type: 'eventbridge', busName: 'bus' },
      ],
    },
  ]);
  it('first matching route wins; * spans any characters', () => {
    expect(table.resolve('order.created')).toEqual(['sqs:https://q/created']);
    expect(table.resolve('order.item.added')).toEqual(['sqs:https://q/all', 'eventbridge:bus']);
    expect(table.resolve('invoice.sent')).toEqual(['sqs:https://q/all', 'eventbridge:bus']);
    expect(table.resolve('orders')).toBeUndefined();
    expect(table.resolve('order')).toBeUndefined();
  });
  it('treats regex characters in patterns literally', () => {
    const literal = new RouteTable([{ match: 'a+b(c)', targets: [{ type: 'eventbridge', busName: 'b' }] }]);
    expect(literal.resolve('a+b(c)')).toEqual(['eventbridge:b']);
    expect(literal.resolve('aab(c)')).toBeUndefined();
  });
});

describe('classifyCallError', () => {
  it('sorts AWS failures by whose fault they are', () => {
    const aws = (name: string, status?: number) =>
      Object.assign(new Error(name), { name, $metadata: { httpStatusCode: status } });
    expect(classifyCallError(aws('QueueDoesNotExist', 400))).toMatchObject({
      kind: 'config',
      retryable: true,
    });
    expect(classifyCallError(aws('AccessDeniedException', 400))).toMatchObject({
      kind: 'config',
      retryable: true,
    });
    expect(classifyCallError(aws('ThrottlingException', 400))).toMatchObject({
      kind: 'throttled',
      retryable: true,
    });
    expect(classifyCallError(aws('InternalError', 500))).toMatchObject({ kind: 'server', retryable: true });
    expect(classifyCallError(aws('BatchRequestTooLong', 400))).toMatchObject({
      kind: 'invalid-request',
      retryable: false,
    });
    expect(
      classifyCallError(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })),
    ).toMatchObject({
      kind: 'network',
      retryable: true,
      code: 'ECONNREFUSED',
    });
    expect(classifyCallError(aws('SomethingNew', 400))).toMatchObject({ kind: 'unknown', retryable: true });
  });
});

describe('messageGroupId', () => {
  it('uses the aggregate key, hashed when over 128 characters', () => {
    expect(messageGroupId({ aggregateType: 'order', aggregateId: '42' })).toBe('order:42');
    const long = messageGroupId({ aggregateType: 'order', aggregateId: 'x'.repeat(200) });
    expect(long).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(long.length).toBeLessThanOrEqual(128);
    expect(messageGroupId({ aggregateType: 'order', aggregateId: 'x'.repeat(200) })).toBe(long);
  });
});

describe('resolveRelayOptions', () => {
  it('fills defaults without letting undefined override them', () => {
    const resolved = resolveRelayOptions({
      batchSize: undefined,
      backoff: { maxMs: 5000, baseMs: undefined },
    });
    expect(resolved.batchSize).toBe(100);
    expect(resolved.backoff).toEqual({ baseMs: 1000, factor: 2, maxMs: 5000 });
  });
});

describe('sendBatchOrSplit', () => {
  const items = ['a', 'b', 'c'].map((id) => ({ event: { id } as OutboxEvent }));
  const refused = Object.assign(new Error('bad entry'), {
    name: 'InvalidMessageContents',
    $metadata: { httpStatusCode: 400 },
  });

  it('splits a batch refused as a whole so that only the culprit fails', async () => {
    const results = new Map<string, TargetResult>();
    const calls: string[][] = [];
    await sendBatchOrSplit(items, 'SQS', results, async (batch) => {
      calls.push(batch.map((p) => p.event.id));
      if (batch.some((p) => p.event.id === 'b')) throw refused;
      for (const p of batch) results.set(p.event.id, { ok: true });
    });
    expect(calls).toEqual([['a', 'b', 'c'], ['a'], ['b'], ['c']]);
    expect(results.get('a')).toEqual({ ok: true });
    expect(results.get('c')).toEqual({ ok: true });
    expect(results.get('b')).toMatchObject({ ok: false, retryable: false, code: 'InvalidMessageContents' });
  });

  it('gives every event the failure of an outage, without splitting', async () => {
    const results = new Map<string, TargetResult>();
    let calls = 0;
    await sendBatchOrSplit(items, 'EventBridge', results, async () => {
      calls++;
      throw Object.assign(new Error('slow down'), {
        name: 'ThrottlingException',
        $metadata: { httpStatusCode: 400 },
      });
    });
    expect(calls).toBe(1);
    expect([...results.values()]).toEqual(
      items.map(() => ({
        ok: false,
        retryable: true,
        environment: true,
        code: 'ThrottlingException',
        error: 'EventBridge throttled error: ThrottlingException: slow down',
      })),
    );
  });
});

describe('classifyEntryError', () => {
  it('judges a per-entry code like the same code on a whole call', () => {
    // SenderFault=true on a throttling or KMS code is still the environment's fault.
    for (const code of ['ThrottlingException', 'KmsThrottled', 'KMS.ThrottlingException', 'InternalError']) {
      expect(classifyEntryError(code, 'x', true)).toMatchObject({ retryable: true, environment: true });
      expect(
        classifyCallError(Object.assign(new Error('x'), { name: code, $metadata: { httpStatusCode: 400 } })),
      ).toMatchObject({ retryable: true, environment: true });
    }
    expect(classifyEntryError('KmsAccessDenied', 'x', true)).toMatchObject({
      kind: 'config',
      environment: true,
    });
    expect(classifyEntryError('InvalidMessageContents', 'x', false)).toMatchObject({
      retryable: false,
      environment: false,
    });
    expect(classifyEntryError('MalformedDetail', 'x')).toMatchObject({ retryable: false });
  });

  it('falls back on SenderFault only for codes it does not know', () => {
    expect(classifyEntryError('SomethingNew', 'x', true)).toMatchObject({ retryable: false });
    expect(classifyEntryError('SomethingNew', 'x', false)).toMatchObject({
      retryable: true,
      environment: true,
    });
    // An unknown EventBridge code: retried, and each try spends an attempt.
    expect(classifyEntryError('SomethingNew', 'x')).toMatchObject({ retryable: true, environment: false });
  });
});

describe('CircuitBreaker', () => {
  it('opens after consecutive environment failures, probes once per growing interval, closes on success', () => {
    let now = 0;
    const changes: string[] = [];
    const breaker = new CircuitBreaker(
      { failureThreshold: 3, probeBaseMs: 1_000, probeMaxMs: 4_000, now: () => now, random: () => 1 },
      (c) => changes.push(c.state),
    );
    const env = { environment: true };
    breaker.report(env);
    breaker.report({ environment: false }); // an event's own fault says the target is fine
    breaker.report(env);
    breaker.report(env);
    expect(breaker.allowCall()).toBe(true);
    breaker.report(env);
    expect(breaker.isOpen).toBe(true);
    expect(breaker.allowCall()).toBe(false);
    expect(breaker.retryAfterMs()).toBe(1_000);

    now = 1_000;
    expect(breaker.probeDue).toBe(true);
    expect(breaker.allowCall()).toBe(true); // the probe
    expect(breaker.allowCall()).toBe(false); // only one at a time
    // While it is in flight, events wait past the next probe should it fail
    // (twice the doubled wait): a success releases them anyway.
    expect(breaker.retryAfterMs()).toBe(4_000);
    breaker.report(env); // probe failed: wait doubles
    expect(breaker.retryAfterMs()).toBe(2_000);
    now = 3_000;
    expect(breaker.allowCall()).toBe(true);
    breaker.report(env);
    now = 7_000;
    expect(breaker.allowCall()).toBe(true);
    breaker.report(env);
    expect(breaker.retryAfterMs()).toBe(4_000); // capped
    expect(breaker.takeRecovered()).toBe(false);

    now = 11_000;
    expect(breaker.allowCall()).toBe(true);
    breaker.report(undefined);
    expect(breaker.isOpen).toBe(false);
    expect(breaker.takeRecovered()).toBe(true);
    expect(breaker.takeRecovered()).toBe(false);
    expect(changes).toEqual(['open', 'open', 'open', 'open', 'closed']);
  });
});

describe('RoutingPublisher', () => {
  const event = (id: string): OutboxEvent => ({
    id,
    seq: '1',
    aggregateType: 'order',
    aggregateId: id,
    eventType: 'order.created',
    payload: {},
    payloadJson: '{}',
    headers: {},
    createdAt: new Date(),
    attempts: 1,
    deliveredTargets: [],
  });

  it('treats a target that returns no result for an event as a retryable failure, never as delivered', async () => {
    const silent: Transport = { key: 'sqs:https://q/1', send: async () => new Map() };
    const publisher = new RoutingPublisher(
      new RouteTable([{ match: '*', targets: [{ type: 'sqs', queueUrl: 'https://q/1' }] }]),
      [silent],
    );
    const [outcome] = await publisher.publish([event('a')]);
    expect(outcome).toMatchObject({ ok: false, retryable: true, environment: false, code: 'MissingResult' });
  });
});

describe('compactJson', () => {
  it('drops white space between tokens and keeps string contents', () => {
    const text = '{"a": 1, "b": [1, 2, {"c": "x y, z: \\" q\\\\"}], "d": "\\t"}';
    expect(compactJson(text)).toBe('{"a":1,"b":[1,2,{"c":"x y, z: \\" q\\\\"}],"d":"\\t"}');
    expect(JSON.parse(compactJson(text))).toEqual(JSON.parse(text));
    expect(compactJson('{"a":1}')).toBe('{"a":1}');
  });

  it('counts and writes the same bytes without building the string', () => {
    for (const text of [
      '{"a": 1, "b": [1, 2, {"c": "x y, z: \\" q\\\\"}], "d": "\\t"}',
      '{"å": "ü €", "emoji": "😀 😀", "n": [1, 2,\n 3]}',
      '{}',
      '"just a string with spaces"',
      `{"big": "${'x '.repeat(50_000)}", "list": [${Array.from({ length: 1000 }, (_, i) => i).join(', ')}]}`,
    ]) {
      const expected = Buffer.from(compactJson(text), 'utf8');
      expect(compactJsonBytes(text)).toBe(expected.length);
      expect(compactJsonBuffer(text).equals(expected)).toBe(true);
      expect(publishedPayloadBytes({ payload: undefined, payloadJson: text })).toBe(expected.length);
    }
    expect(publishedPayloadBytes({ payload: { a: 'é' }, payloadJson: undefined as unknown as string })).toBe(
      Buffer.byteLength('{"a":"é"}'),
    );
  });
});
