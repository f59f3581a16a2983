/**
 * One relay draining the backlog, in a process of its own so that its peak
 * resident memory is the relay's alone. Prints one JSON line:
 * { published, seconds, calls, rss_mb }.
 * Env: DATABASE_URL, PUBLISHER=null|sqs, QUEUE_URL (sqs), RELAY (JSON options).
 */
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { SQSClient } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { NullPublisher } from '../lib/publish/null-publisher.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import { Relay } from '../lib/relay/relay.js';

let peak = process.memoryUsage().rss;
const sampler = setInterval(() => {
  peak = Math.max(peak, process.memoryUsage().rss);
}, 20);

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
let calls = 0;
const publisher =
  process.env.PUBLISHER === 'sqs'
    ? createAwsPublisher({
        routes: [{ match: '*', targets: [{ type: 'sqs', queueUrl: process.env.QUEUE_URL as string }] }],
        sqs: new SQSClient({ maxAttempts: 3 }),
        eventBridge: new EventBridgeClient({}),
        source: 'outbox',
        concurrency: Number(process.env.CONCURRENCY ?? 16),
        onCall: () => calls++,
      })
    : new NullPublisher();
const relay = new Relay({ db: pool, publisher, options: JSON.parse(process.env.RELAY ?? '{}') });
const started = performance.now();
const summary = await relay.run({ remainingMs: () => 600_000, stopWhenIdle: true, skipStats: true });
const seconds = (performance.now() - started) / 1000;
clearInterval(sampler);
peak = Math.max(peak, process.memoryUsage().rss);
console.log(JSON.stringify({ published: summary.published, seconds, calls, rss_mb: peak / 2 ** 20 }));
await pool.end();
