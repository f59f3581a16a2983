/**
 * `npm start`: the deployed stack, running locally. PostgreSQL (a local
 * server, DATABASE_URL or embedded), MiniStack with IAM enforced, migrations,
 * the database secret, `serverless deploy --stage local` of serverless.yml as
 * it is, then a producer writing orders while the deployed functions do the
 * rest: the EventBridge schedule invokes the relay (and one asynchronous
 * invoke starts it at once), the bus rule feeds the consumer queue, the event
 * source mapping invokes the consumer. The live status reads the database and
 * the functions' own logs. Ctrl-C stops everything this started.
 */
import fs from 'node:fs';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { Command, InvalidArgumentError } from 'commander';
import logUpdate from 'log-update';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { createOrder } from '../lib/example/orders.js';
import { createRelayWaker } from '../lib/outbox/relay-waker.js';
import { startStackEmulator } from './local/aws-emulator.js';
import { migrateExample } from './local/example-schema.js';
import { FaultProxy } from './local/fault-proxy.js';
import { node22PathDir } from './local/node22.js';
import { ensureDatabase, startLocalPostgres } from './local/postgres.js';
import {
  type DeployedStack,
  deployStack,
  emulatorClientConfig,
  invokeFunction,
  jsonLines,
  LogTail,
} from './local/stack.js';

const number = (min: number, max: number) => (value: string) => {
  const n = Number(value);
  if (!Number.isFinite(n) || n < min || n > max)
    throw new InvalidArgumentError(`expected a number from ${min} to ${max}`);
  return n;
};

const opts = new Command()
  .name('npm start --')
  .description(
    'Deploy the stack into a local emulator (MiniStack, IAM enforced) and run producer → outbox → relay → SQS/EventBridge → consumer through the deployed functions, with a live status.',
  )
  .option('--rate <events/s>', 'orders written per second', number(0, 2000), 20)
  .option(
    '--duration <seconds>',
    'produce for this long, then drain and stop (0: until Ctrl-C)',
    number(0, 86_400),
    0,
  )
  .option(
    '--fail-rate <0..1>',
    'share of EventBridge entries a fault proxy reports as failed (watch retries, duplicates, dead letters)',
    number(0, 1),
    0,
  )
  .option(
    '--max-attempts <n>',
    'attempts before an event is dead-lettered (stage param maxAttempts)',
    number(1, 100),
    5,
  )
  .option('--summary <file>', 'write a final JSON summary to this file')
  .option('--logs', 'print the functions’ log lines instead of the live status')
  .parse()
  .opts<{
    rate: number;
    duration: number;
    failRate: number;
    maxAttempts: number;
    summary?: string;
    logs?: boolean;
  }>();

const say = (line: string) => process.stderr.write(`${line}\n`);
const tty = process.stdout.isTTY && !opts.logs;
const startedAt = Date.now();
const cleanups: Array<() => Promise<void>> = [];
let stopping = false;

async function cleanUp() {
  for (const step of cleanups.reverse())
    await step().catch((error: Error) => say(`cleanup: ${error.message}`));
  cleanups.length = 0;
}
process.on('SIGINT', () => {
  if (stopping) process.exit(130); // second Ctrl-C: leave now
  void stop('Ctrl-C');
});
process.on('SIGTERM', () => void stop('SIGTERM'));

// --- infrastructure ---------------------------------------------------------
const postgres = await startLocalPostgres({ dataDir: '.local/pgdata', persistent: true, log: say });
cleanups.push(() => postgres.stop());
const databaseUrl = await ensureDatabase(postgres.adminUrl, 'outbox_local');
await migrate({ databaseUrl });
await migrateExample(databaseUrl);
const pool = new pg.Pool({ connectionString: databaseUrl, max: 6 });
cleanups.push(() => pool.end());
say(`PostgreSQL (${postgres.source}): ${databaseUrl}`);

let proxy: FaultProxy | undefined;
if (opts.failRate > 0) {
  proxy = await FaultProxy.start(opts.failRate);
  cleanups.push(() => (proxy as FaultProxy).stop());
}
const nodeDir = node22PathDir(say);
say('starting MiniStack (IAM enforced)…');
const emulator = await startStackEmulator({
  auth: true,
  nodeDir,
  // The deployed functions inherit this: their EventBridge calls go through the proxy.
  env: proxy ? { AWS_ENDPOINT_URL_EVENTBRIDGE: proxy.endpoint } : {},
  log: say,
});
cleanups.push(() => emulator.stop());
proxy?.forwardTo(emulator.endpoint);
say(`MiniStack: ${emulator.endpoint}; deploying the stack (serverless deploy --stage local)…`);
let stack: DeployedStack;
try {
  const t0 = Date.now();
  stack = await deployStack({
    endpoint: emulator.endpoint,
    databaseUrl,
    params: { maxAttempts: String(opts.maxAttempts) },
    log: opts.logs ? say : undefined,
  });
  say(`deployed in ${((Date.now() - t0) / 1000).toFixed(0)} s: ${stack.functionName('relay')}, …`);
} catch (error) {
  say((error as Error).message);
  await cleanUp();
  process.exit(1);
}
// The schedule's first run comes a minute after the rule exists; start now.
await invokeFunction(stack, 'relay', { source: 'npm-start', 'detail-type': 'Deploy' }, 'Event');
say(`Another terminal: DATABASE_URL=${databaseUrl} npm run outbox -- status\n`);

// --- producer: orders at a steady rate ----------------------------------------
// The relay scales to zero between bursts (relayMode elastic): the producer
// wakes it right after its commits, as a service would (docs/deploy.md).
const waker = createRelayWaker({
  functionName: stack.functionName('relay'),
  lambda: new LambdaClient({ ...emulatorClientConfig(stack.endpoint), maxAttempts: 1 }),
  db: pool, // no wake while a relay runs
});
let produced = 0;
let produceErrors = 0;
const firstOrder = new Date();
const producer = (async () => {
  const t0 = Date.now();
  while (!stopping && !(opts.duration > 0 && Date.now() - t0 >= opts.duration * 1000)) {
    const due = Math.floor((opts.rate * (Date.now() - t0)) / 1000);
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
    if (writes.length > 0) await waker.wake();
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
})();

// --- what the deployed functions did --------------------------------------------
// Read from their CloudWatch log groups in the emulator. MiniStack writes an
// invocation's lines when it ends, so a relay run (up to 65 s) shows up then;
// its open database sessions show that it is running meanwhile.
const relayLogs = new LogTail(stack, 'relay', startedAt);
const consumerLogs = new LogTail(stack, 'consumer', startedAt);
const seen = { relayInvocations: 0, relayRuns: 0, relayErrors: 0, duplicates: 0, consumerFailed: 0 };
async function followLogs() {
  for (const [tail, name] of [
    [relayLogs, 'relay'],
    [consumerLogs, 'consumer'],
  ] as const) {
    const lines = await tail.poll();
    if (opts.logs) for (const line of lines) say(`[${name}] ${line.trimEnd()}`);
    for (const line of lines)
      if (name === 'relay' && line.startsWith('START RequestId')) seen.relayInvocations++;
    for (const entry of jsonLines(lines)) {
      if (name === 'relay' && entry.message === 'relay run finished') seen.relayRuns++;
      if (name === 'relay' && entry.level === 'ERROR') seen.relayErrors++;
      if (name === 'consumer' && entry.message === 'batch handled') {
        seen.duplicates += Number(entry.duplicates ?? 0);
        seen.consumerFailed += Number(entry.failed ?? 0);
      }
    }
  }
}

const STATUS = `
SELECT
  (SELECT count(*) FROM outbox_events WHERE created_at >= $1)::int AS written,
  (SELECT count(*) FROM outbox_events WHERE created_at >= $1 AND processed_at IS NOT NULL AND discarded_at IS NULL)::int AS published,
  (SELECT count(*) FROM outbox_events WHERE created_at >= $1 AND processed_at IS NULL AND dead_lettered_at IS NULL)::int AS pending,
  (SELECT count(*) FROM outbox_events WHERE created_at >= $1 AND attempts > 1)::int AS retried,
  (SELECT count(*) FROM outbox_events WHERE created_at >= $1 AND dead_lettered_at IS NOT NULL)::int AS dead,
  (SELECT count(*) FROM processed_events p JOIN outbox_events e ON e.id = p.event_id
     WHERE p.consumer = 'order-consumer' AND e.created_at >= $1)::int AS consumed,
  (SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM p.processed_at - e.created_at) * 1000)
     FROM processed_events p JOIN outbox_events e ON e.id = p.event_id
     WHERE p.consumer = 'order-consumer' AND e.created_at >= $1) AS lag,
  (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $2)::int AS relay_sessions`;

interface Status {
  written: number;
  published: number;
  pending: number;
  retried: number;
  dead: number;
  consumed: number;
  lag: [number, number] | null;
  relay_sessions: number;
}

async function status(): Promise<Status> {
  await followLogs();
  const { rows } = await pool.query(STATUS, [firstOrder, stack.functionName('relay')]);
  return rows[0] as Status;
}

function show(s: Status): string {
  const lag = s.lag ? `${Math.round(s.lag[0])} / ${Math.round(s.lag[1])} ms` : '–';
  const elapsed = Math.round((Date.now() - startedAt) / 1000);
  return [
    `outbox (deployed on MiniStack) ${elapsed}s  rate ${opts.rate}/s, fail-rate ${opts.failRate}; Ctrl-C to stop`,
    `  produced        ${produced}${produceErrors ? ` (${produceErrors} failed)` : ''}`,
    `  relay           ${seen.relayInvocations} invocations logged, ${seen.relayRuns} run summaries${seen.relayErrors ? `, ${seen.relayErrors} error lines` : ''}; ${s.relay_sessions} database sessions open now`,
    `  published       ${s.published}   pending ${s.pending}`,
    `  retries         ${s.retried} events needed a retry${proxy ? ` (${proxy.injected} failures injected)` : ''}`,
    `  dead letters    ${s.dead}`,
    `  consumer        ${s.consumed} consumed, ${seen.duplicates} duplicates skipped${seen.consumerFailed ? `, ${seen.consumerFailed} failed` : ''}`,
    `  lag p50 / p99   ${lag}   (commit → consumed)`,
  ].join('\n');
}

let last: Status | undefined;
const render = async () => {
  try {
    last = await status();
    const text = show(last);
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
const statusTimer = setInterval(render, tty ? 1000 : 5000);

// --- stopping -----------------------------------------------------------------
async function stop(reason: string, drainMs = 0) {
  if (stopping) return;
  stopping = true;
  clearInterval(statusTimer);
  await producer;
  if (drainMs > 0) {
    say(
      `\n${reason}: producing stopped; waiting up to ${drainMs / 1000} s for the deployed functions to finish…`,
    );
    const deadline = Date.now() + drainMs;
    while (Date.now() < deadline) {
      await render();
      if (last && last.pending === 0 && last.consumed + last.dead >= produced) break;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  } else {
    say(`\nstopping (${reason})…`);
  }
  await render();
  if (tty) logUpdate.done();
  if (opts.summary && last) {
    const summary = {
      produced,
      published: last.published,
      consumed: last.consumed,
      duplicates_skipped: seen.duplicates,
      dead_letters: last.dead,
      retried: last.retried,
      relay_invocations: seen.relayInvocations,
      lag_ms_p50: last.lag ? Math.round(last.lag[0]) : null,
      lag_ms_p99: last.lag ? Math.round(last.lag[1]) : null,
      fail_rate: opts.failRate,
      rate: opts.rate,
      duration_s: Math.round((Date.now() - startedAt) / 1000),
    };
    fs.writeFileSync(opts.summary, `${JSON.stringify(summary, null, 2)}\n`);
    say(`summary written to ${opts.summary}`);
  }
  await cleanUp();
  process.exit(0);
}

if (opts.duration > 0) {
  void producer.then(() => {
    if (!stopping) void stop(`--duration ${opts.duration}s`, 120_000);
  });
}
