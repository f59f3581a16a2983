/**
 * `npm start`: the deployed stack, running locally. PostgreSQL (a local
 * server, DATABASE_URL or embedded), MiniStack with IAM enforced, migrations,
 * the database secret, `serverless deploy --stage local` of serverless.yml as
 * it is, then a producer writing orders while the deployed functions do the
 * rest: the EventBridge schedule invokes the relay, the bus rule feeds the
 * consumer queue, the event source mapping invokes the consumer. Before the
 * first order, the relay and the consumer are invoked once per execution
 * environment they start with (the warm-up below). The live status reads the
 * database and the functions' own logs. Ctrl-C stops everything this started.
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
// --- warm-up: each function's first invocations, before the first order ------
// The schedule's first run comes a minute after the rule exists: run the
// relay now, and wait for it, so that the first orders find it warm (its
// bundle loaded, the secret read, its database connections open) instead of
// waiting for a cold start, and the first wake does not start a second
// relay beside a cold one. Two environments: the one that drains, and one
// for what comes while it runs (the schedule's tick, a wake as a run
// leaves), which otherwise starts cold beside it. The consumer likewise:
// the event source mapping starts with five batches at once, each in an
// execution environment of its own; an empty batch sets one up (the secret,
// its connection) and handles nothing. A deploy pipeline would warm the same way.
const RELAY_ENVIRONMENTS = 2;
const CONSUMER_ENVIRONMENTS = 5;
const warmUp = async (name: 'relay' | 'consumer', count: number, payload: unknown) => {
  const at = Date.now();
  const results = await Promise.all(
    Array.from({ length: count }, () => invokeFunction(stack, name, payload)),
  );
  for (const failed of results.filter((r) => r.functionError))
    say(`warm-up: the ${name} failed (${failed.functionError}): ${JSON.stringify(failed.payload)}`);
  return Date.now() - at;
};
const [relayWarmMs, consumerWarmMs] = await Promise.all([
  warmUp('relay', RELAY_ENVIRONMENTS, { source: 'npm-start', 'detail-type': 'Deploy' }),
  warmUp('consumer', CONSUMER_ENVIRONMENTS, { Records: [] }),
]);
// MiniStack runs each execution environment as a process of its own.
const environments = (name: 'relay' | 'consumer') =>
  emulator.processCpuSeconds(`${stack.functionName(name)}-`).size;
say(
  `warmed up: the relay in ${(relayWarmMs / 1000).toFixed(1)} s, the consumer in ${(consumerWarmMs / 1000).toFixed(1)} s (${environments('relay')} + ${environments('consumer')} environments)`,
);
say(`Another terminal: DATABASE_URL=${databaseUrl} npm run outbox -- status\n`);

// --- producer: orders at a steady rate ----------------------------------------
// The relay scales to zero between bursts (relayMode elastic): the producer
// wakes it right after its commits, as a service would (docs/deploy.md).
const waker = createRelayWaker({
  functionName: stack.functionName('relay'),
  lambda: new LambdaClient({ ...emulatorClientConfig(stack.endpoint), maxAttempts: 1 }),
  db: pool, // no wake while a relay runs
  logger: {
    debug: () => {},
    info: () => {},
    warn: (message, ...extra) => say(`waker: ${message} ${JSON.stringify(Object.assign({}, ...extra))}`),
    error: (message, ...extra) => say(`waker: ${message} ${JSON.stringify(Object.assign({}, ...extra))}`),
  },
});
/** What the producer's wakes did (WakeOutcome), for the summary. */
const wakes: Record<string, number> = {};
let produced = 0;
let produceErrors = 0;
let firstProduceError: string | undefined;
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
        }).catch((error: Error) => {
          produceErrors++;
          if (!firstProduceError) {
            firstProduceError = error.message;
            say(`an order failed: ${error.message}`);
          }
        }),
      );
    }
    await Promise.all(writes);
    produced += writes.length;
    if (writes.length > 0) {
      const outcome = await waker.wake();
      wakes[outcome] = (wakes[outcome] ?? 0) + 1;
    }
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
/**
 * The functions' invocations, from their log lines: REPORT gives the
 * duration (MiniStack's includes a cold start) and the line's timestamp the
 * end; the handler's JSON line what it did. (Powertools' cold_start is
 * false in every line MiniStack writes.) Kept for the first seconds only
 * (the summary's first_seconds).
 */
interface Invocation {
  fn: 'relay' | 'consumer';
  endAt: number;
  durationMs: number;
  /** Relay: events claimed; consumer: records in the batch. */
  events?: number;
}
const invocations = new Map<string, Invocation>();
const FIRST_SECONDS_MS = 15_000;
async function followLogs() {
  for (const [tail, name] of [
    [relayLogs, 'relay'],
    [consumerLogs, 'consumer'],
  ] as const) {
    const events = await tail.pollEvents();
    const lines = events.map((event) => event.message);
    if (opts.logs) for (const line of lines) say(`[${name}] ${line.trimEnd()}`);
    // An invocation's lines arrive together when it ends: its REPORT, then what it logged.
    for (const { message, timestamp } of events) {
      if (name === 'relay' && message.startsWith('START RequestId')) seen.relayInvocations++;
      const report = /^REPORT RequestId: (\S+)\tDuration: (\d+) ms/.exec(message);
      const durationMs = Number(report?.[2]);
      if (report && timestamp - durationMs < firstOrder.getTime() + FIRST_SECONDS_MS)
        invocations.set(report[1] as string, { fn: name, endAt: timestamp, durationMs });
    }
    for (const entry of jsonLines(lines)) {
      if (name === 'relay' && entry.message === 'relay run finished') seen.relayRuns++;
      if (name === 'relay' && entry.level === 'ERROR') seen.relayErrors++;
      if (name === 'consumer' && entry.message === 'batch handled') {
        seen.duplicates += Number(entry.duplicates ?? 0);
        seen.consumerFailed += Number(entry.failed ?? 0);
      }
      const found = invocations.get(String(entry.function_request_id));
      if (found && (entry.message === 'relay run finished' || entry.message === 'batch handled'))
        found.events = Number(entry.message === 'batch handled' ? entry.records : entry.claimed);
    }
  }
}

/**
 * Where the first seconds went: each function's first invocations (start
 * and end in ms from the first order, events handled) and,
 * second by second from the first commit, the orders written and the
 * longest commit → published and commit → consumed.
 */
function firstInvocations(fn: 'relay' | 'consumer', count: number) {
  const t0 = firstOrder.getTime();
  return [...invocations.values()]
    .filter((i) => i.fn === fn)
    .map((i) => ({
      start_ms: i.endAt - i.durationMs - t0,
      end_ms: i.endAt - t0,
      events: i.events,
    }))
    .sort((a, b) => a.start_ms - b.start_ms)
    .slice(0, count);
}

/** Lags from the database's clock; "steady" counts orders from the tenth second on. */
const LAGS = `
WITH e AS (
  SELECT e.created_at,
         extract(epoch FROM e.processed_at - e.created_at) * 1000 AS published_ms,
         extract(epoch FROM p.processed_at - e.created_at) * 1000 AS consumed_ms
    FROM outbox_events e
    LEFT JOIN processed_events p ON p.event_id = e.id AND p.consumer = 'order-consumer'
   WHERE e.created_at >= $1 AND e.discarded_at IS NULL),
t0 AS (SELECT min(created_at) AS at FROM e),
s AS (SELECT floor(extract(epoch FROM e.created_at - t0.at))::int AS second, e.* FROM e, t0)
SELECT
  (SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY published_ms) FROM s) AS publish,
  (SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY consumed_ms) FROM s WHERE second >= 10) AS steady,
  (SELECT extract(epoch FROM t0.at - $1::timestamptz) * 1000 FROM t0) AS first_commit_ms,
  (SELECT json_agg(json_build_array(second, orders, publish_max_ms, consume_max_ms) ORDER BY second) FROM (
     SELECT second, count(*)::int AS orders, round(max(published_ms))::int AS publish_max_ms,
            round(max(consumed_ms))::int AS consume_max_ms
       FROM s WHERE second < 10 GROUP BY second) b) AS by_second`;

async function lagFigures() {
  const { rows } = await pool.query(LAGS, [firstOrder]);
  const row = rows[0] as {
    publish: [number, number] | null;
    steady: [number, number] | null;
    first_commit_ms: number | null;
    by_second: Array<[number, number, number | null, number | null]> | null;
  };
  const ms = (value: number | undefined) => (value === undefined ? null : Math.round(value));
  return {
    publish_lag_ms_p50: ms(row.publish?.[0]),
    publish_lag_ms_p99: ms(row.publish?.[1]),
    lag_ms_p50_steady: ms(row.steady?.[0]),
    lag_ms_p99_steady: ms(row.steady?.[1]),
    first_seconds: {
      // Times in ms from the producer's start; the first commit came at first_commit_ms.
      first_commit_ms: row.first_commit_ms === null ? null : Math.round(row.first_commit_ms),
      // The warm-up before the first order: how long each function's first invocations took.
      warm_up_ms: { relay: relayWarmMs, consumer: consumerWarmMs },
      relay: firstInvocations('relay', 8),
      consumer: firstInvocations('consumer', 8),
      // [second from the first commit, orders, max commit → published ms, max commit → consumed ms]
      by_second: row.by_second ?? [],
    },
  };
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
      wakes,
      lag_ms_p50: last.lag ? Math.round(last.lag[0]) : null,
      lag_ms_p99: last.lag ? Math.round(last.lag[1]) : null,
      produce_errors: produceErrors,
      ...(await lagFigures()),
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
