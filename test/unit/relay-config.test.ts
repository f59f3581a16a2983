import { describe, expect, it } from 'vitest';
import { loadRelayConfig, parseRoutes } from '../../lib/config/relay-config.js';
import { ConfigError } from '../../lib/errors.js';

const routes = JSON.stringify([{ match: 'order.*', targets: [{ type: 'eventbridge', busName: 'bus' }] }]);

describe('loadRelayConfig', () => {
  it('applies defaults to a minimal environment', () => {
    const config = loadRelayConfig({ OUTBOX_ROUTES: routes });
    expect(config).toEqual({
      relay: expect.objectContaining({ batchSize: undefined, ordering: undefined }),
      routes: JSON.parse(routes),
      eventSource: 'outbox',
      concurrency: 8,
      listen: false,
      directCalls: false,
      circuit: { failureThreshold: undefined, probeMaxMs: undefined },
    });
  });

  it('reads every knob', () => {
    const config = loadRelayConfig({
      OUTBOX_ROUTES: routes,
      OUTBOX_BATCH_SIZE: '250',
      OUTBOX_WORKERS: '3',
      OUTBOX_LEASE_MS: '30000',
      OUTBOX_MAX_ATTEMPTS: '7',
      OUTBOX_BACKOFF_BASE_MS: '500',
      OUTBOX_BACKOFF_FACTOR: '1.5',
      OUTBOX_BACKOFF_MAX_MS: '60000',
      OUTBOX_ORDERING: 'aggregate',
      OUTBOX_MAX_PER_AGGREGATE: '20',
      OUTBOX_SAFETY_MARGIN_MS: '5000',
      OUTBOX_IDLE_WAIT_MS: '100',
      OUTBOX_LISTEN: 'true',
      OUTBOX_DIRECT_CALLS: 'true',
      OUTBOX_CONCURRENCY: '16',
      OUTBOX_EVENT_SOURCE: 'shop.orders',
      OUTBOX_MAX_PENDING_AGE_MS: '7200000',
      OUTBOX_TARGET_FAILURES: '5',
      OUTBOX_TARGET_PROBE_MAX_MS: '30000',
      OUTBOX_IDLE_TAIL_MS: '1500',
      OUTBOX_MAX_RELAYS: '3',
      OUTBOX_SCALE_OUT_BACKLOG: '500',
      OUTBOX_SCALE_OUT_AGE_MS: '5000',
      OUTBOX_SCALE_OUT_PARK_MS: '60000',
      OUTBOX_SLOT_ALIVE_MS: '10000',
      // 3 relays × (3 workers + 1 + 1 for OUTBOX_LISTEN) = 15
      OUTBOX_DB_CONNECTION_BUDGET: '15',
    });
    expect(config.circuit).toEqual({ failureThreshold: 5, probeMaxMs: 30_000 });
    expect(config.relay).toEqual({
      batchSize: 250,
      workers: 3,
      leaseMs: 30000,
      maxAttempts: 7,
      backoff: { baseMs: 500, factor: 1.5, maxMs: 60000 },
      ordering: 'aggregate',
      maxPerAggregate: 20,
      safetyMarginMs: 5000,
      idleWaitMs: 100,
      maxPendingAgeMs: 7_200_000,
      idleTailMs: 1500,
      maxRelays: 3,
      scaleOutBacklog: 500,
      scaleOutAgeMs: 5000,
      scaleOutParkMs: 60_000,
      slotAliveMs: 10_000,
    });
    expect(config).toMatchObject({
      concurrency: 16,
      listen: true,
      directCalls: true,
      eventSource: 'shop.orders',
    });
  });

  const bad: Array<[string, Record<string, string>, RegExp]> = [
    ['OUTBOX_ROUTES', {}, /required/],
    ['OUTBOX_ROUTES', { OUTBOX_ROUTES: '{nope' }, /not valid JSON/],
    [
      'OUTBOX_ROUTES',
      { OUTBOX_ROUTES: '[{"match":"x","targets":[{"type":"sqs","queueUrl":"not a url"}]}]' },
      /queueUrl/,
    ],
    ['OUTBOX_ROUTES', { OUTBOX_ROUTES: '[{"match":"x","targets":[{"type":"kafka"}]}]' }, /type/],
    [
      'OUTBOX_ROUTES',
      {
        OUTBOX_ROUTES: JSON.stringify([
          { match: 'a.*', targets: [{ type: 'sqs', queueUrl: 'https://q.example/1/q' }] },
          {
            match: 'b.*',
            targets: [{ type: 'sqs', queueUrl: 'https://q.example/1/q', maxMessageBytes: 2048 }],
          },
        ]),
      },
      /routes\[1\]\.targets\[0\] and routes\[0\]\.targets\[0\] name the same destination/,
    ],
    ['OUTBOX_TARGET_FAILURES', { OUTBOX_ROUTES: routes, OUTBOX_TARGET_FAILURES: '0' }, /from 1 to 100/],
    ['OUTBOX_BATCH_SIZE', { OUTBOX_ROUTES: routes, OUTBOX_BATCH_SIZE: '0' }, /from 1 to 5000/],
    ['OUTBOX_ORDERING', { OUTBOX_ROUTES: routes, OUTBOX_ORDERING: 'fifo' }, /"none" or "aggregate"/],
    ['OUTBOX_LISTEN', { OUTBOX_ROUTES: routes, OUTBOX_LISTEN: 'maybe' }, /true or false/],
    ['OUTBOX_DIRECT_CALLS', { OUTBOX_ROUTES: routes, OUTBOX_DIRECT_CALLS: 'on' }, /true or false/],
    ['OUTBOX_MAX_PER_AGGREGATE', { OUTBOX_ROUTES: routes, OUTBOX_MAX_PER_AGGREGATE: '0' }, /from 1 to 5000/],
  ];
  it.each(bad)('%s bad → ConfigError naming it (%#)', (variable, env, message) => {
    let error: unknown;
    try {
      loadRelayConfig(env);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).variable).toBe(variable);
    expect((error as ConfigError).message).toMatch(message);
  });
});

describe('loadRelayConfig: large payloads', () => {
  it('reads the bucket and prefix; without a bucket there are none', () => {
    expect(loadRelayConfig({ OUTBOX_ROUTES: routes }).largePayloads).toBeUndefined();
    expect(
      loadRelayConfig({ OUTBOX_ROUTES: routes, OUTBOX_LARGE_PAYLOAD_BUCKET: 'my-payloads' }).largePayloads,
    ).toEqual({ bucket: 'my-payloads', prefix: 'payloads' });
    expect(
      loadRelayConfig({
        OUTBOX_ROUTES: routes,
        OUTBOX_LARGE_PAYLOAD_BUCKET: 'my-payloads',
        OUTBOX_LARGE_PAYLOAD_PREFIX: '/outbox/large/',
      }).largePayloads,
    ).toEqual({ bucket: 'my-payloads', prefix: 'outbox/large' });
  });

  it('refuses a bad bucket name or prefix, naming the variable', () => {
    expect(() =>
      loadRelayConfig({ OUTBOX_ROUTES: routes, OUTBOX_LARGE_PAYLOAD_BUCKET: 'My_Bucket' }),
    ).toThrow(/^OUTBOX_LARGE_PAYLOAD_BUCKET: expected an S3 bucket name/);
    expect(() =>
      loadRelayConfig({
        OUTBOX_ROUTES: routes,
        OUTBOX_LARGE_PAYLOAD_BUCKET: 'b-1',
        OUTBOX_LARGE_PAYLOAD_PREFIX: 'a b',
      }),
    ).toThrow(/^OUTBOX_LARGE_PAYLOAD_PREFIX: expected a key prefix/);
  });
});

describe('parseRoutes', () => {
  it('accepts routes built in code or given as JSON text', () => {
    const parsed = parseRoutes(JSON.parse(routes));
    expect(parsed).toEqual(JSON.parse(routes));
    expect(parseRoutes(routes)).toEqual(parsed);
  });

  it('names the option and the bad field', () => {
    const bad = [{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: 'not a url' }] }];
    expect(() => parseRoutes(bad)).toThrow(ConfigError);
    expect(() => parseRoutes(bad)).toThrow(/^routes: 0\.targets\.0\.queueUrl/);
    expect(() => parseRoutes([], 'ORDERS_ROUTES')).toThrow(/^ORDERS_ROUTES: /);
    expect(() => parseRoutes(undefined)).toThrow(/required: a JSON array of routes/);
  });
});
