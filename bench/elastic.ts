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
 * - full load: GB-s per million events, a backlog drained by the relays
 *   scaling out (`loadCost`).
 *
 * Writes `elastic` into bench/results.json, leaving the other keys. About 15
 * minutes (the emulator's scheduler fires once a minute). The scale-out
 * ratio (maxRelays 1 against 4, 50 ms on every AWS call) is not measured yet.
 */
import fs from 'node:fs';
import os from 'node:os';
import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { createOrder } from '../lib/example/orders.js';
import { createRelayWaker } from '../lib/outbox/relay-waker.js';
import { WAKE_SOURCE } from '../lib/relay/invocation.js';
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

const LOAD_EVENTS = Number(process.env.BENCH_ELASTIC_LOAD_EVENTS ?? 20_000);

/**
 * Full load: a backlog of LOAD_EVENTS orders, one wake, the relays (scaling
 * out to maxRelays) drain it; their GB-seconds per million events published,
 * from the REPORT lines of every relay invocation until the slots are free
 * again. The deployed consumer processes the same events on the same two
 * cores meanwhile, so the relays' durations are, if anything, long.
 */
async function loadCost(stack: DeployedStack, wake: () => Promise<void>) {
  log(`full load: ${LOAD_EVENTS} orders, one wake…`);
  // Every relay invocation from here on counts (a schedule tick may start on the orders before the wake).
  await sleep(10_000); // the REPORT lines of the wake part's last invocations
  const tail = new LogTail(stack, 'relay', Date.now() - 120_000);
  await billed(tail);
  const ids: string[] = [];
  for (let i = 0; i < LOAD_EVENTS; i += 200) {
    const orders = await Promise.all(
      Array.from({ length: Math.min(200, LOAD_EVENTS - i) }, (_, k) =>
        createOrder(pool, { customerId: `load-${i + k}`, totalCents: 100, currency: 'SEK' }),
      ),
    );
    ids.push(...orders.map((o) => o.eventId));
  }
  const started = Date.now();
  await wake();
  let most = 0;
  for (;;) {
    const { rows } = await pool.query(
      `SELECT (SELECT count(*)::int FROM outbox_relay_slots WHERE held_until > now()) AS held,
              (SELECT count(*)::int FROM outbox_events WHERE id = ANY($1::uuid[]) AND processed_at IS NULL) AS left`,
      [ids],
    );
    most = Math.max(most, rows[0].held);
    if (rows[0].left === 0) break;
    if (Date.now() - started > 600_000) throw new Error(`${rows[0].left} events left after 10 minutes`);
    await sleep(200);
  }
  const drainMs = Date.now() - started;
  // Every relay returns after its tail; then its REPORT line.
  for (;;) {
    const { rows } = await pool.query(
      'SELECT count(*)::int AS n FROM outbox_relay_slots WHERE held_until > now()',
    );
    if (rows[0].n === 0) break;
    await sleep(500);
  }
  await sleep(10_000);
  const { gbSeconds, invocations } = await billed(tail);
  const perMillion = (gbSeconds / LOAD_EVENTS) * 1_000_000;
  log(
    `full load: ${LOAD_EVENTS} events in ${(drainMs / 1000).toFixed(1)} s, ${invocations} relay invocations (at most ${most} at once), ${gbSeconds.toFixed(1)} GB-s → ${perMillion.toFixed(0)} GB-s per million`,
  );
  return {
    gbSecondsPerMillion: Math.round(perMillion),
    events: LOAD_EVENTS,
    drainSeconds: Math.round(drainMs / 100) / 10,
    eventsPerSecond: Math.round(LOAD_EVENTS / (drainMs / 1000)),
    relayInvocations: invocations,
    mostRelaysAtOnce: most,
  };
}

/** The stack of stage local (no TLS to the local PostgreSQL), in this relay mode; a redeploy updates it. */
/** One wake, as a producer's waker sends it (not debounced: the bench calls it once). */
async function invokeWake(stack: DeployedStack) {
  const lambda = new LambdaClient({ ...emulatorClientConfig(stack.endpoint), maxAttempts: 1 });
  await lambda.send(
    new InvokeCommand({
      FunctionName: stack.functionName('relay'),
      InvocationType: 'Event',
      Payload: Buffer.from(JSON.stringify({ source: WAKE_SOURCE })),
    }),
  );
}

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
  const load = await loadCost(stack, () => invokeWake(stack));

  log('redeploying the same stack, relayMode always-on…');
  stack = await deploy('always-on');
  const alwaysOnIdle = await idleCost(stack, 'always-on');

  const elastic = {
    machine: `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, node ${process.version}, MiniStack (local Lambda executor, Node 22)`,
    date: new Date().toISOString(),
    setup: `the deployed stack (serverless.yml) on MiniStack: relay 512 MB, maxRelays 4, schedule rate(1 minute); idle ${IDLE_MINUTES} minutes per mode; a schedule tick that finds nothing at its first claim returns at once; wake: one order every 10 s, a woken relay's idle tail 3 s, waker keep-alive 2 s`,
    idle_gb_s_per_hour: elasticIdle.gbSecondsPerHour,
    always_on_gb_s_per_hour: alwaysOnIdle.gbSecondsPerHour,
    idle_invocations: { elastic: elasticIdle.invocations, always_on: alwaysOnIdle.invocations },
    wake_latency_ms: woken,
    schedule_latency_ms: scheduled,
    gb_s_per_million: load.gbSecondsPerMillion,
    full_load: load,
    targets: { idle_gb_s_per_hour: 40, wake_p50_ms: 300, wake_p99_ms: 2000, gb_s_per_million: 200 },
    not_measured_yet: ['scale_out_ratio'],
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
