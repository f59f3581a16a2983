/**
 * `npm run bench:elastic`: the elastic relay in the deployed stack, on
 * MiniStack (its scheduler, its Lambda executor, IAM enforced), against the
 * local PostgreSQL. Side by side in one run:
 *
 * - idle cost: the relay's billed GB-seconds per idle hour, from the REPORT
 *   lines of its invocations (billed duration × memory size), first with
 *   `relayMode: elastic`, then with the same stack redeployed `always-on`;
 * - wake latency: with the relay scaled to zero between them, one order
 *   every 10 s written by a producer that wakes the relay after its commit
 *   (`createRelayWaker`), commit → published (`processed_at - created_at`,
 *   the database's clock); and the same with the schedule alone (no wake).
 *
 * Writes `elastic` into bench/results.json, leaving the other keys. About 13
 * minutes (the emulator's scheduler fires once a minute). Scale out and GB-s
 * per million events are not measured yet.
 */
import fs from 'node:fs';
import os from 'node:os';
import { LambdaClient } from '@aws-sdk/client-lambda';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { createOrder } from '../lib/example/orders.js';
import { createRelayWaker } from '../lib/outbox/relay-waker.js';
import { startStackEmulator } from '../scripts/local/aws-emulator.js';
import { migrateExample } from '../scripts/local/example-schema.js';
import { node22PathDir } from '../scripts/local/node22.js';
import { dropDatabase, ensureDatabase, startLocalPostgres } from '../scripts/local/postgres.js';
import { type DeployedStack, deployStack, emulatorClientConfig, LogTail } from '../scripts/local/stack.js';

const IDLE_MINUTES = Number(process.env.BENCH_ELASTIC_IDLE_MINUTES ?? 3);
const WAKE_EVENTS = Number(process.env.BENCH_ELASTIC_WAKE_EVENTS ?? 12);
const SCHEDULE_EVENTS = Number(process.env.BENCH_ELASTIC_SCHEDULE_EVENTS ?? 6);
const SPACING_MS = 10_000;
const RESULTS = new URL('./results.json', import.meta.url);
const log = (line: string) => process.stderr.write(`${line}\n`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const postgres = await startLocalPostgres({ log });
await dropDatabase(postgres.adminUrl, 'outbox_bench_elastic');
const databaseUrl = await ensureDatabase(postgres.adminUrl, 'outbox_bench_elastic');
await migrate({ databaseUrl });
await migrateExample(databaseUrl);
const pool = new pg.Pool({ connectionString: databaseUrl, max: 4 });
const emulator = await startStackEmulator({ auth: true, nodeDir: node22PathDir(log), log });

/** The relay's REPORT lines since the tail started: GB-seconds and invocations. */
async function billed(tail: LogTail): Promise<{ gbSeconds: number; invocations: number }> {
  let gbSeconds = 0;
  let invocations = 0;
  for (const line of await tail.poll()) {
    // A relay that cannot work (no database, no permission) ends in a moment: not an idle relay.
    if (/^(Error|.*"level":"ERROR")/.test(line))
      throw new Error(`the deployed relay failed: ${line.slice(0, 300)}`);
    const report = /^REPORT RequestId: .*Billed Duration: (\d+) ms\s+Memory Size: (\d+) MB/.exec(line);
    if (!report) continue;
    invocations++;
    gbSeconds += (Number(report[1]) / 1000) * (Number(report[2]) / 1024);
  }
  return { gbSeconds, invocations };
}

/**
 * Idle for `minutes` after the schedule's first run (a minute after the rule
 * is created): the relay's GB-seconds per hour at that rate.
 */
async function idleCost(stack: DeployedStack, label: string) {
  log(`${label}: waiting for the schedule's first run, then ${IDLE_MINUTES} idle minutes…`);
  await sleep(75_000);
  const tail = new LogTail(stack, 'relay', Date.now());
  await billed(tail); // what came before the window
  const started = Date.now();
  await sleep(IDLE_MINUTES * 60_000);
  // An invocation's REPORT comes when it ends: wait for the last one.
  await sleep(label === 'always-on' ? 80_000 : 10_000);
  const { gbSeconds, invocations } = await billed(tail);
  const minutes = (Date.now() - started) / 60_000;
  const perHour = (gbSeconds / minutes) * 60;
  log(
    `${label}: ${invocations} invocations, ${gbSeconds.toFixed(1)} GB-s in ${minutes.toFixed(1)} min → ${perHour.toFixed(1)} GB-s per hour`,
  );
  return {
    gbSecondsPerHour: Math.round(perHour * 10) / 10,
    invocations,
    minutes: Math.round(minutes * 10) / 10,
  };
}

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;

/** Orders one every 10 s; commit → published per event, from the database's clock. */
async function latency(count: number, wake: (() => Promise<void>) | undefined) {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const { eventId } = await createOrder(pool, {
      customerId: `c-${i}`,
      totalCents: 100 + i,
      currency: 'SEK',
    });
    ids.push(eventId);
    if (wake) await wake();
    await sleep(SPACING_MS);
  }
  const deadline = Date.now() + 120_000;
  for (;;) {
    const { rows } = await pool.query(
      `SELECT extract(epoch FROM processed_at - created_at) * 1000 AS ms FROM outbox_events
       WHERE id = ANY($1::uuid[]) AND processed_at IS NOT NULL`,
      [ids],
    );
    if (rows.length === ids.length || Date.now() > deadline) {
      const ms = rows.map((r) => Number(r.ms)).sort((a, b) => a - b);
      if (ms.length < ids.length)
        throw new Error(`${ids.length - ms.length} of ${ids.length} events not published within 2 minutes`);
      return {
        events: ids.length,
        published: ms.length,
        p50: Math.round(percentile(ms, 50)),
        p99: Math.round(percentile(ms, 99)),
        max: Math.round(ms.at(-1) ?? Number.NaN),
      };
    }
    await sleep(1_000);
  }
}

/** The stack of stage local (no TLS to the local PostgreSQL), in this relay mode; a redeploy updates it. */
const deploy = (relayMode: 'elastic' | 'always-on') =>
  deployStack({ endpoint: emulator.endpoint, databaseUrl, stage: 'local', params: { relayMode } });

let stack: DeployedStack;
try {
  log('deploying the stack, relayMode elastic…');
  stack = await deploy('elastic');
  const elasticIdle = await idleCost(stack, 'elastic');
  const waker = createRelayWaker({
    functionName: stack.functionName('relay'),
    lambda: new LambdaClient({ ...emulatorClientConfig(stack.endpoint), maxAttempts: 1 }),
  });
  log(`wake latency: ${WAKE_EVENTS} orders, one every 10 s, each followed by a wake…`);
  const woken = await latency(WAKE_EVENTS, () => waker.wake());
  log(`  ${JSON.stringify(woken)}`);
  log(`schedule alone: ${SCHEDULE_EVENTS} orders, one every 10 s, no wake…`);
  const scheduled = await latency(SCHEDULE_EVENTS, undefined);
  log(`  ${JSON.stringify(scheduled)}`);

  log('redeploying the same stack, relayMode always-on…');
  stack = await deploy('always-on');
  const alwaysOnIdle = await idleCost(stack, 'always-on');

  const elastic = {
    machine: `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, node ${process.version}, MiniStack (local Lambda executor, Node 22)`,
    date: new Date().toISOString(),
    setup: `the deployed stack (serverless.yml) on MiniStack: relay 512 MB, schedule rate(1 minute); idle ${IDLE_MINUTES} minutes per mode; a schedule tick that finds nothing at its first claim returns at once; wake: one order every 10 s, a woken relay's idle tail 3 s, waker keep-alive 2 s`,
    idle_gb_s_per_hour: elasticIdle.gbSecondsPerHour,
    always_on_gb_s_per_hour: alwaysOnIdle.gbSecondsPerHour,
    idle_invocations: { elastic: elasticIdle.invocations, always_on: alwaysOnIdle.invocations },
    wake_latency_ms: woken,
    schedule_latency_ms: scheduled,
    targets: { idle_gb_s_per_hour: 40, wake_p50_ms: 300, wake_p99_ms: 2000 },
    not_measured_yet: ['gb_s_per_million', 'scale_out_ratio'],
  };
  log(JSON.stringify(elastic, null, 2));
  const results = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
  results.elastic = elastic;
  fs.writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
} finally {
  await emulator.stop();
  await pool.end();
  await dropDatabase(postgres.adminUrl, 'outbox_bench_elastic').catch(() => {});
  await postgres.stop();
}
