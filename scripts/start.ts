/**
 * `npm start`: the whole outbox running locally. PostgreSQL (embedded unless
 * DATABASE_URL or a local server), an AWS emulator (unless AWS_ENDPOINT_URL),
 * migrations, the queues/bus/rule of serverless.yml, a producer writing orders
 * at a steady rate, and the relay Lambda handler invoked as its schedule would
 * invoke it, the consumer Lambda handler fed from its queue as Lambda's SQS
 * event source mapping would feed it, and a live status. Ctrl-C stops cleanly.
 */
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import { Command, InvalidArgumentError } from 'commander';
import logUpdate from 'log-update';
import pg from 'pg';
import { SqsEventSource } from '../lib/consumer/sqs-event-source.js';
import { migrate, setNotifyTrigger } from '../lib/db/migrate.js';
import { createOrder } from '../lib/example/orders.js';
import { type EmulatorName, startLocalAws, useLocalAwsEnv } from './local/aws-emulator.js';
import { injectFailures } from './local/fault-injection.js';
import { ensureDatabase, startLocalPostgres } from './local/postgres.js';
import { ensureLocalResources } from './local/resources.js';

const number = (min: number, max: number) => (value: string) => {
  const n = Number(value);
  if (!Number.isFinite(n) || n < min || n > max)
    throw new InvalidArgumentError(`expected a number from ${min} to ${max}`);
  return n;
};

const opts = new Command()
  .name('npm start --')
  .description('Run producer → outbox → relay → SQS/EventBridge → consumer locally, with a live status.')
  .option('--rate <events/s>', 'orders written per second', number(0, 5000), 20)
  .option('--duration <seconds>', 'stop after this long (0: until Ctrl-C)', number(0, 86_400), 0)
  .option(
    '--fail-rate <0..1>',
    'share of publishes to fail on purpose (watch retries and dead letters)',
    number(0, 1),
    0,
  )
  .option('--max-attempts <n>', 'attempts before an event is dead-lettered', number(1, 1000), 5)
  .option('--period <seconds>', 'relay schedule period (EventBridge rate)', number(1, 3600), 60)
  .option('--budget <seconds>', 'relay invocation time budget (Lambda timeout)', number(2, 900), 75)
  .option(
    '--emulator <name>',
    'AWS emulator to start when AWS_ENDPOINT_URL is unset: ministack | moto',
    'ministack',
  )
  .option('--logs', 'print the relay’s JSON logs instead of the live status')
  .parse()
  .opts<{
    rate: number;
    duration: number;
    failRate: number;
    maxAttempts: number;
    period: number;
    budget: number;
    emulator: EmulatorName;
    logs?: boolean;
  }>();

const say = (line: string) => process.stderr.write(`${line}\n`);
const tty = process.stdout.isTTY && !opts.logs;

// --- infrastructure ---------------------------------------------------------
const postgres = await startLocalPostgres({ dataDir: '.local/pgdata', persistent: true, log: say });
const databaseUrl = await ensureDatabase(postgres.adminUrl, 'outbox_local');
await migrate({ databaseUrl });
const pool = new pg.Pool({ connectionString: databaseUrl, max: 6 });
await setNotifyTrigger(pool, true);
const aws = await startLocalAws({ emulator: opts.emulator, log: say });
useLocalAwsEnv(aws.endpoint);
const sqs = new SQSClient({});
const resources = await ensureLocalResources(sqs, new EventBridgeClient({}));

say(`PostgreSQL (${postgres.source}): ${databaseUrl}`);
say(`AWS emulator (${aws.source}): ${aws.endpoint}`);
say(`Relay queue: ${resources.eventsQueueUrl}; bus: ${resources.busName} → ${resources.consumerQueueUrl}`);
say(`Another terminal: DATABASE_URL=${databaseUrl} npm run outbox -- status\n`);

// --- the relay Lambda, configured as serverless.yml configures it -------------
Object.assign(process.env, {
  DATABASE_URL: databaseUrl,
  OUTBOX_ROUTES: JSON.stringify([
    {
      match: 'order.*',
      targets: [
        { type: 'sqs', queueUrl: resources.eventsQueueUrl },
        { type: 'eventbridge', busName: resources.busName },
      ],
    },
  ]),
  OUTBOX_LISTEN: 'true',
  OUTBOX_MAX_ATTEMPTS: String(opts.maxAttempts),
  OUTBOX_BACKOFF_BASE_MS: process.env.OUTBOX_BACKOFF_BASE_MS ?? '500',
  OUTBOX_BACKOFF_MAX_MS: process.env.OUTBOX_BACKOFF_MAX_MS ?? '10000',
  OUTBOX_SAFETY_MARGIN_MS: String(Math.min(10_000, (opts.budget * 1000) / 4)),
  CONSUMER_NAME: 'order-consumer',
  POWERTOOLS_LOG_LEVEL: opts.logs ? 'INFO' : 'SILENT',
  POWERTOOLS_METRICS_DISABLED: 'true',
});
const { createRelayHandler } = await import('../functions/relay.js');
const { consumerHandler } = await import('../functions/consumer.js');
const relayHandler = createRelayHandler({ wrapPublisher: (p) => injectFailures(p, opts.failRate) });

let stopping = false;
const inFlight = new Set<Promise<unknown>>();
let invocations = 0;

/** A Lambda-like context whose remaining time drops to zero on Ctrl-C. */
function context(budgetMs: number, functionName = 'outbox-relay') {
  const deadline = Date.now() + budgetMs;
  if (functionName === 'outbox-relay') invocations++;
  return {
    functionName,
    awsRequestId: `local-${invocations}`,
    getRemainingTimeInMillis: () => (stopping ? 0 : Math.max(0, deadline - Date.now())),
  } as never;
}

function tick() {
  if (stopping) return;
  const run = relayHandler(
    { source: 'aws.events', 'detail-type': 'Scheduled Event' },
    context(opts.budget * 1000),
  )
    .catch((error: Error) => say(`relay invocation failed: ${error.message}`))
    .finally(() => inFlight.delete(run));
  inFlight.add(run);
}
tick();
const schedule = setInterval(tick, opts.period * 1000);

// --- the consumer Lambda, fed from its queue like an SQS event source mapping --
const source = new SqsEventSource({ sqs, queueUrl: resources.consumerQueueUrl, waitTimeSeconds: 1 });
let acknowledged = 0;
let consumerErrors = 0;
const consumerLoop = (async () => {
  while (!stopping) {
    const result = await source
      .pollOnce((event) => consumerHandler(event, context(30_000, 'outbox-consumer')), {
        retryDelaySeconds: 2,
      })
      .catch((error: Error) => {
        say(`consumer poll failed: ${error.message}`);
        return undefined;
      });
    acknowledged += result?.deleted ?? 0;
    if (result?.error) consumerErrors++;
  }
})();

// --- producer: orders at a steady rate ----------------------------------------
let produced = 0;
let produceErrors = 0;
const startedAt = Date.now();
const producer = (async () => {
  while (!stopping) {
    const due = Math.floor((opts.rate * (Date.now() - startedAt)) / 1000);
    const writes: Promise<unknown>[] = [];
    while (produced + writes.length < due && writes.length < 50) {
      writes.push(
        createOrder(pool, {
          customerId: `customer-${Math.floor(Math.random() * 1000)}`,
          totalCents: Math.floor(Math.random() * 100_000),
          currency: 'SEK',
        }).catch(() => produceErrors++),
      );
    }
    await Promise.all(writes);
    produced += writes.length;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
})();

// --- live status --------------------------------------------------------------
const STATUS = `
SELECT
  (SELECT count(*) FROM outbox_events WHERE processed_at IS NULL AND dead_lettered_at IS NULL)::int AS pending,
  (SELECT count(*) FROM outbox_events WHERE processed_at > now() - interval '5 seconds')::int AS recent,
  (SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - created_at) * 1000)
     FROM outbox_events WHERE processed_at > now() - interval '5 seconds') AS lag,
  (SELECT count(*) FROM outbox_events WHERE processed_at IS NULL AND retry_after > now())::int AS backing_off,
  (SELECT count(*) FROM outbox_events WHERE attempts > 1 AND created_at >= $1)::int AS retried,
  (SELECT count(*) FROM outbox_events WHERE dead_lettered_at IS NOT NULL)::int AS dead,
  (SELECT count(*) FROM processed_events WHERE consumer = 'order-consumer' AND processed_at >= $1)::int AS consumed`;

async function status(): Promise<string> {
  const { rows } = await pool.query(STATUS, [new Date(startedAt)]);
  const r = rows[0];
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: resources.eventsQueueUrl,
      AttributeNames: ['ApproximateNumberOfMessages'],
    }),
  );
  const lag = r.lag ? `${Math.round(r.lag[0])} / ${Math.round(r.lag[1])} ms` : '–';
  const elapsed = Math.round((Date.now() - startedAt) / 1000);
  return [
    `outbox running ${elapsed}s  (rate ${opts.rate}/s, fail-rate ${opts.failRate}, relay invocations ${invocations}, Ctrl-C to stop)`,
    `  produced        ${produced}${produceErrors ? ` (${produceErrors} failed)` : ''}`,
    `  pending         ${r.pending}`,
    `  published/s     ${(r.recent / 5).toFixed(1)}`,
    `  lag p50 / p99   ${lag}   (commit → publish, last 5 s)`,
    `  retries         ${r.retried} events needed a retry; ${r.backing_off} backing off now`,
    `  dead letters    ${r.dead}`,
    `  relay queue     ${Attributes?.ApproximateNumberOfMessages ?? '?'} messages`,
    `  consumer        ${r.consumed} processed, ${Math.max(0, acknowledged - r.consumed)} duplicates skipped${consumerErrors ? `, ${consumerErrors} failed batches` : ''}`,
  ].join('\n');
}

const render = async () => {
  try {
    const text = await status();
    if (tty) logUpdate(text);
    else if (!opts.logs)
      console.log(
        text
          .split('\n')
          .map((l) => l.trim())
          .join(' | '),
      );
  } catch (error) {
    say(`status failed: ${(error as Error).message}`);
  }
};
const statusTimer = setInterval(render, tty ? 500 : 5000);

// --- stopping -----------------------------------------------------------------
async function stop(reason: string) {
  if (stopping) return;
  stopping = true;
  clearInterval(schedule);
  clearInterval(statusTimer);
  say(`\nstopping (${reason}): finishing the batches in hand…`);
  await producer;
  await Promise.all(inFlight);
  await consumerLoop;
  await render();
  if (tty) logUpdate.done();
  await pool.end();
  await aws.stop();
  await postgres.stop();
  process.exit(0);
}
process.on('SIGINT', () => {
  if (stopping) process.exit(130); // second Ctrl-C: leave now
  void stop('Ctrl-C');
});
process.on('SIGTERM', () => void stop('SIGTERM'));
if (opts.duration > 0) setTimeout(() => void stop(`--duration ${opts.duration}s`), opts.duration * 1000);
