/**
 * One relay draining the backlog in a process of its own, for bench/db-cost.ts:
 * its user + system CPU (process.cpuUsage) covers the relay alone, not the
 * emulator or the benchmark. Prints one JSON line:
 * { published, seconds, calls, cpu_user_ms, cpu_system_ms }.
 *
 * Env: DATABASE_URL; PUBLISHER=null|sqs|eventbridge|both (both: each event
 * to the queue and the bus, as the reference stack routes it); QUEUE_URL
 * (sqs, both); BUS_NAME (eventbridge, both); RELAY (JSON options); CONCURRENCY (API calls in
 * flight, default 16); TIME_BOX_MS (stop claiming after this long, default
 * 600 s); SDK_MD5=off (SQS client option md5: false: do not hash every
 * message body and check the digests SQS returns; the SDK's default, and the
 * deployed relay's, is on); DIRECT_CALLS=1 (createAwsPublisher's
 * `directCalls`: the hot calls without the SDK's middleware stack, as the
 * deployed relay makes them).
 */
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { SQSClient } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { NullPublisher } from '../lib/publish/null-publisher.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import { Relay } from '../lib/relay/relay.js';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
// The deployed relay's client settings (functions/relay.ts).
const sdkOptions = {
  maxAttempts: 2,
  requestHandler: { connectionTimeout: 3_000, requestTimeout: 10_000, throwOnRequestTimeout: true },
};
const md5 = process.env.SDK_MD5 === 'off' ? { md5: false as const } : {};
let calls = 0;
const kind = process.env.PUBLISHER ?? 'null';
const queue = { type: 'sqs' as const, queueUrl: process.env.QUEUE_URL as string };
const bus = { type: 'eventbridge' as const, busName: process.env.BUS_NAME as string };
const targets = kind === 'both' ? [queue, bus] : kind === 'sqs' ? [queue] : [bus];
const publisher =
  kind === 'null'
    ? new NullPublisher()
    : createAwsPublisher({
        routes: [{ match: '*', targets }],
        sqs: new SQSClient({ ...sdkOptions, ...md5 }),
        eventBridge: new EventBridgeClient(sdkOptions),
        source: 'outbox',
        concurrency: Number(process.env.CONCURRENCY ?? 16),
        onCall: () => calls++,
        directCalls: process.env.DIRECT_CALLS === '1',
      });
const relay = new Relay({ db: pool, publisher, options: JSON.parse(process.env.RELAY ?? '{}') });
const timeBoxMs = Number(process.env.TIME_BOX_MS ?? 600_000);
const cpuBefore = process.cpuUsage();
const started = performance.now();
const summary = await relay.run({
  remainingMs: () => started + timeBoxMs - performance.now(),
  stopWhenIdle: true,
  skipStats: true,
});
const seconds = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(cpuBefore);
console.log(
  JSON.stringify({
    published: summary.published,
    seconds,
    calls,
    cpu_user_ms: cpu.user / 1000,
    cpu_system_ms: cpu.system / 1000,
  }),
);
await pool.end();
