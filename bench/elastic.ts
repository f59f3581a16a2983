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
 * - steady load: 1, 10, 100 and 1,000 orders a second for two minutes each,
 *   from four producers each waking the relay after its commits: the
 *   relay's GB-s per hour, how many relays ran, and commit → published
 *   (`steady`; the rates from BENCH_ELASTIC_STEADY_RATES);
 * - full load: GB-s per million events, a backlog drained by the relays
 *   scaling out (`loadCost`), the deployed consumer's event source mapping
 *   disabled meanwhile (in AWS it does not run on the relay's CPU), and the
 *   bus's rule to the consumer queue too (MiniStack delivers each entry
 *   before it answers PutEvents, AWS after; `--bus-rule-on` keeps it);
 * - scale out: the drain time of a 100,000-event backlog with `maxRelays`
 *   1 and then 4, every AWS call of the deployed functions delayed by 50 ms
 *   (MiniStack fronted by the fault proxy: queue URLs and the functions'
 *   endpoint name the proxy), so relays wait on the network as in AWS
 *   rather than on this machine's two cores (`scaleOut`);
 * - direct calls (`--parts direct-calls`, not in the default set: it holds
 *   the relay to its CPU share, cgroups, root, and runs without it where
 *   they cannot be written, saying so): the relay's OUTBOX_DIRECT_CALLS on
 *   and off side by side, alternating (`--pairs`, 2), at 512 MB: one
 *   relay's events/s draining a backlog (`maxRelays` 1), the drain time of
 *   the same backlog with `maxRelays` 4, and one aggregate's events/s in
 *   ordered mode (ordering aggregate, the FIFO queue, emptied before each
 *   drain); the variable is switched by updating the deployed function's
 *   environment (the workers start afresh), every other setting as
 *   deployed (`direct_calls`). `--direct-calls-measures one,four,hot` picks
 *   measures; `--direct-calls-delay-ms 20` puts MiniStack behind the fault
 *   proxy, every AWS call of the functions that late (keys `…_network_20ms`);
 * - relay memory (`--parts memory`, not in the default set: it needs Linux
 *   cgroups, root): MiniStack's function workers each limited to their
 *   memory's share of a CPU, as in AWS (scripts/local/lambda-cpu-share.ts),
 *   then the full load at each of `--relay-memory` (512,256 by default),
 *   and one relay with every AWS call 50 ms late.
 *
 * `--relay-concurrency` sets the relays' AWS calls in flight (stage param
 * relayConcurrency; serverless.yml's default when not given) in every part
 * but scale-out, whose relays keep `--scale-out-concurrency` (4) in flight
 * (SCALE_OUT_CONCURRENCY says why).
 * `--relay-idle-tail-ms` sets an elastic relay's idle tail (stage param
 * relayIdleTailMs; serverless.yml's default when not given) in every part.
 * `--cpu-share` holds every part's functions to their CPU share the same
 * way (results.json's `cpu_share` says which parts ran so).
 * Writes `elastic` into bench/results.json, leaving the other keys (and the
 * other parts' figures when `--parts` runs only some). About 35 minutes (the
 * emulator's scheduler fires once a minute).
 *
 *   npm run bench:elastic                          # every part but memory
 *   npm run bench:elastic -- --parts scale-out     # idle,wake,steady,load,scale-out,memory
 *   npm run bench:elastic -- --parts memory --relay-memory 512,256
 *   npm run bench:elastic -- --cpu-share           # every part, as in AWS's CPU shares
 *   npm run bench:elastic -- --parts direct-calls --pairs 3
 *   npm run bench:elastic -- --parts direct-calls --direct-calls-measures one,hot --direct-calls-delay-ms 20
 */

import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { DisableRuleCommand, EnableRuleCommand, EventBridgeClient } from '@aws-sdk/client-eventbridge';
import {
  GetFunctionConfigurationCommand,
  InvokeCommand,
  LambdaClient,
  ListEventSourceMappingsCommand,
  UpdateEventSourceMappingCommand,
  UpdateFunctionConfigurationCommand,
} from '@aws-sdk/client-lambda';
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  type QueueAttributeName,
  SQSClient,
} from '@aws-sdk/client-sqs';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { withTransaction } from '../lib/db/transaction.js';
import { orderEvents } from '../lib/example/events.js';
import { createOrder, createOrders } from '../lib/example/orders.js';
import { createRelayWaker } from '../lib/outbox/relay-waker.js';
import { WAKE_SOURCE } from '../lib/relay/invocation.js';
import { PARKED_HOLDER } from '../lib/sql/relay-slots.js';
import { type StackEmulator, startStackEmulator } from '../scripts/local/aws-emulator.js';
import { migrateExample } from '../scripts/local/example-schema.js';
import { FaultProxy } from '../scripts/local/fault-proxy.js';
import { MB_PER_VCPU } from '../scripts/local/lambda-cpu-share.js';
import { node22PathDir } from '../scripts/local/node22.js';
import { dropDatabase, ensureDatabase, startLocalPostgres } from '../scripts/local/postgres.js';
import {
  type DeployedStack,
  deployStack,
  emulatorClientConfig,
  LogTail,
  SERVICE,
  stageParamDefault,
} from '../scripts/local/stack.js';
import { calibrationMs } from './calibrate.js';

const PARTS = ['idle', 'wake', 'steady', 'load', 'scale-out', 'memory', 'direct-calls'] as const;
/** Parts not in the default set: they need cgroups (root). */
const OPT_IN: readonly Part[] = ['memory', 'direct-calls'];
type Part = (typeof PARTS)[number];
const { values: args } = parseArgs({
  options: {
    // `memory` and `direct-calls` are not in the default set: they need cgroups (root).
    parts: { type: 'string', default: PARTS.filter((p) => !OPT_IN.includes(p)).join(',') },
    // For `memory`: the relay's memory sizes, in MB.
    'relay-memory': { type: 'string', default: '512,256' },
    // Every part's functions held to their CPU share (cgroups, root), as `memory` always is.
    'cpu-share': { type: 'boolean', default: false },
    // The relay's AWS calls in flight (stage param relayConcurrency) in every
    // part but scale-out; the stage's default (serverless.yml) when not given.
    'relay-concurrency': { type: 'string' },
    // The relay's AWS calls in flight in the scale-out part (below, SCALE_OUT_CONCURRENCY).
    'scale-out-concurrency': { type: 'string', default: '4' },
    // An elastic relay's idle tail in ms (stage param relayIdleTailMs) in
    // every part; the stage's default (serverless.yml) when not given.
    'relay-idle-tail-ms': { type: 'string' },
    // Full load with the bus's rule to the consumer queue left on (below, busRule).
    'bus-rule-on': { type: 'boolean', default: false },
    // For `direct-calls`: pairs of drains (on and off) per measure, and the backlogs' sizes.
    pairs: { type: 'string', default: '2' },
    'direct-calls-events': { type: 'string', default: '30000' },
    'hot-events': { type: 'string', default: '5000' },
    // For `direct-calls`: which measures (one relay, maxRelays 4, the hot
    // aggregate), and a delay on every AWS call of the functions (0: none).
    'direct-calls-measures': { type: 'string', default: 'one,four,hot' },
    'direct-calls-delay-ms': { type: 'string', default: '0' },
  },
});
const parts = new Set(String(args.parts).split(',')) as Set<Part>;
for (const part of parts) {
  if (!PARTS.includes(part)) throw new Error(`--parts: unknown part "${part}" (${PARTS.join(', ')})`);
}
const RELAY_MEMORY_SIZES = String(args['relay-memory'])
  .split(',')
  .map((v) => {
    const mb = Number(v);
    if (!Number.isInteger(mb) || mb < 128 || mb > 10_240)
      throw new Error(`--relay-memory: "${v}" is not a Lambda memory size in MB (128–10240)`);
    return mb;
  });
/** A count of calls in flight from `option`, else serverless.yml's default relayConcurrency. */
function concurrencyOption(option: string, value: string | undefined): number {
  const text = value ?? stageParamDefault('relayConcurrency');
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`--${option}: "${text}" is not a count of calls in flight`);
  return n;
}
const RELAY_CONCURRENCY = concurrencyOption('relay-concurrency', args['relay-concurrency']);
/**
 * The scale-out measure asks whether relays drain together, each bound by
 * its own network waits, as in AWS. One relay waiting 50 ms a call
 * publishes at most concurrency × 10 / (2 × 0.05 s) events a second (a
 * call to the queue and one to the bus per event): 400 at 4, so four relays
 * (1,600) stay under what this machine's MiniStack serves (about 2,600 a
 * second). At the default 16 one relay alone would reach 1,600, and the
 * ratio would measure the emulator's ceiling, not the relays.
 */
const SCALE_OUT_CONCURRENCY = concurrencyOption('scale-out-concurrency', args['scale-out-concurrency']);
const IDLE_TAIL_MS = (() => {
  const text = args['relay-idle-tail-ms'] ?? stageParamDefault('relayIdleTailMs');
  const ms = Number(text);
  if (!Number.isInteger(ms) || ms < 0 || ms > 900_000)
    throw new Error(`--relay-idle-tail-ms: "${text}" is not an idle tail in ms (0–900000)`);
  return ms;
})();
const IDLE_MINUTES = Number(process.env.BENCH_ELASTIC_IDLE_MINUTES ?? 3);
const WAKE_EVENTS = Number(process.env.BENCH_ELASTIC_WAKE_EVENTS ?? 12);
const SCHEDULE_EVENTS = Number(process.env.BENCH_ELASTIC_SCHEDULE_EVENTS ?? 6);
const SPACING_MS = 10_000;
const RESULTS = new URL('./results.json', import.meta.url);
/** bench/results.json as it was before this run (parts merge their entries into it). */
const results0 = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
const log = (line: string) => process.stderr.write(`${line}\n`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const postgres = await startLocalPostgres({ log });
await dropDatabase(postgres.adminUrl, 'outbox_bench_elastic');
const databaseUrl = await ensureDatabase(postgres.adminUrl, 'outbox_bench_elastic');
await migrate({ databaseUrl });
await migrateExample(databaseUrl);
const pool = new pg.Pool({ connectionString: databaseUrl, max: 4 });
const nodeDir = node22PathDir(log);

/**
 * The relay's REPORT lines since the tail started: GB-seconds and
 * invocations. `skip`: only moves the tail past what came before (logs nothing).
 */
async function billed(
  tail: LogTail,
  skip = false,
): Promise<{
  gbSeconds: number;
  invocations: number;
  measured: { raised: number; notRaised: number; again: number };
  billedMs: number[];
  runs: string[];
  reports: { endedAt: number; billedMs: number; gb: number }[];
}> {
  let gbSeconds = 0;
  let invocations = 0;
  // Each invocation's billed duration, and each run's end (why it stopped:
  // events published), in log order: where a drain's GB-seconds went.
  const runs: string[] = [];
  // Measured scale out: what the relay that scaled found, each time it measured.
  // again: measures that found no rise and left the verdict to a second one.
  const measured = { raised: 0, notRaised: 0, again: 0 };
  const reports: { endedAt: number; billedMs: number; gb: number }[] = [];
  for (const { message: line, timestamp } of await tail.pollEvents()) {
    if (line.includes('"relay run finished"')) {
      try {
        const run = JSON.parse(line.slice(line.indexOf('{'))) as {
          stoppedBecause?: string;
          published?: number;
        };
        runs.push(`${run.stoppedBecause}:${run.published}`);
      } catch {
        runs.push('unparsed');
      }
    }
    const raised = line.includes('"more relays raised the rate"');
    const notRaised = line.includes('"more relays did not raise the rate: the newest leave');
    const again = line.includes('"one measure found the rate not raised; measuring again"');
    if (raised) measured.raised++;
    if (notRaised) measured.notRaised++;
    if (again) measured.again++;
    // What each measure saw (relays and the fleet's rate before and after), for the log.
    if ((raised || notRaised || again) && !skip) {
      try {
        const m = JSON.parse(line.slice(line.indexOf('{'))) as Record<string, unknown>;
        log(
          `  measured${again ? ' (a second measure decides)' : ''}: ${m.running_before} relays ${m.events_per_second_before} events/s → ${m.running} relays ${m.events_per_second} events/s`,
        );
      } catch {
        // counted above; only the log line is lost
      }
    }
    // A relay that cannot work (no database, no permission) ends in a moment: not an idle relay.
    if (/^(Error|.*"level":"ERROR")/.test(line))
      throw new Error(`the deployed relay failed: ${line.slice(0, 300)}`);
    const report = /^REPORT RequestId: .*Billed Duration: (\d+) ms\s+Memory Size: (\d+) MB/.exec(line);
    if (!report) continue;
    invocations++;
    gbSeconds += (Number(report[1]) / 1000) * (Number(report[2]) / 1024);
    reports.push({ endedAt: timestamp, billedMs: Number(report[1]), gb: Number(report[2]) / 1024 });
  }
  return { gbSeconds, invocations, measured, billedMs: reports.map((r) => r.billedMs), runs, reports };
}

/**
 * Opens slots a relay closed in an earlier part (more relays did not raise
 * the rate there): each part starts as a fresh stack would, and measures
 * for itself.
 */
async function openClosedSlots() {
  await pool.query('DELETE FROM outbox_relay_slots WHERE holder = $1', [PARKED_HOLDER]);
}

/**
 * Idle for `minutes` after the schedule's first run (a minute after the rule
 * is created): the relay's GB-seconds per hour at that rate. Each invocation
 * counts for the part of its billed time inside the window (its REPORT line
 * is stamped when it ends): an always-on relay runs about 65 s of each
 * minute, so whole invocations against a window of a few minutes would
 * count four or five of them by where the window falls.
 */
async function idleCost(stack: DeployedStack, label: string) {
  log(`${label}: waiting for the schedule's first run, then ${IDLE_MINUTES} idle minutes…`);
  await sleep(75_000);
  const tail = new LogTail(stack, 'relay', Date.now());
  await billed(tail, true); // what came before the window
  const started = Date.now();
  await sleep(IDLE_MINUTES * 60_000);
  const ended = Date.now();
  // An invocation's REPORT comes when it ends: wait for the last one.
  await sleep(label === 'always-on' ? 80_000 : 10_000);
  const { reports } = await billed(tail);
  let gbSeconds = 0;
  let invocations = 0;
  for (const report of reports) {
    const inside = Math.min(report.endedAt, ended) - Math.max(report.endedAt - report.billedMs, started);
    if (inside <= 0) continue;
    invocations++;
    gbSeconds += (inside / 1000) * report.gb;
  }
  const minutes = (ended - started) / 60_000;
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

/**
 * Orders one every 10 s; commit → published per event, from the database's
 * clock; and what the relay billed meanwhile, per hour at that rate.
 */
async function latency(stack: DeployedStack, count: number, wake: (() => Promise<unknown>) | undefined) {
  const tail = new LogTail(stack, 'relay', Date.now() - 120_000);
  await billed(tail, true); // what came before
  const started = Date.now();
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
      await sleep(10_000); // the last run's tail and its REPORT line
      const { gbSeconds, invocations } = await billed(tail);
      const hours = (Date.now() - started) / 3_600_000;
      return {
        events: ids.length,
        published: ms.length,
        p50: Math.round(percentile(ms, 50)),
        p99: Math.round(percentile(ms, 99)),
        max: Math.round(ms.at(-1) ?? Number.NaN),
        relayInvocations: invocations,
        relayGbSecondsPerHour: Math.round((gbSeconds / hours) * 10) / 10,
      };
    }
    await sleep(1_000);
  }
}

// Sustained load: a relay in AWS drains for its whole budget and its cold
// start is once per container, so the backlog is large enough that start-up
// and the JIT's warm-up weigh little (at 20,000 they were a quarter of the CPU).
const LOAD_EVENTS = Number(process.env.BENCH_ELASTIC_LOAD_EVENTS ?? 100_000);
const SCALE_OUT_EVENTS = Number(process.env.BENCH_ELASTIC_SCALE_OUT_EVENTS ?? 100_000);
const SCALE_OUT_DELAY_MS = 50;
const MEMORY_NETWORK_EVENTS = Number(process.env.BENCH_ELASTIC_MEMORY_NETWORK_EVENTS ?? 20_000);

/** Turns the deployed consumer's SQS event source mapping off or on. */
async function consumerMapping(stack: DeployedStack, enabled: boolean) {
  const lambda = new LambdaClient(emulatorClientConfig(stack.endpoint));
  const { EventSourceMappings } = await lambda.send(
    new ListEventSourceMappingsCommand({ FunctionName: stack.functionName('consumer') }),
  );
  if (!EventSourceMappings?.length) throw new Error('the consumer has no event source mapping');
  for (const mapping of EventSourceMappings) {
    await lambda.send(new UpdateEventSourceMappingCommand({ UUID: mapping.UUID, Enabled: enabled }));
  }
}

/**
 * Turns the stack's bus rule (order events to the consumer queue) off or on.
 * MiniStack matches each PutEvents entry against the rules and delivers it
 * to the targets before it answers; AWS answers once it has taken the
 * entries and delivers later. So the full load turns the rule off, and the
 * relays' wait on PutEvents leaves that work out, as the consumer's mapping
 * is off because the consumer does not run on their CPU in AWS;
 * `--bus-rule-on` keeps it (measured side by side, 2026-12-05: 15–20% more
 * GB-s per million with it, docs/deploy.md).
 */
async function busRule(stack: DeployedStack, enabled: boolean) {
  const events = new EventBridgeClient(emulatorClientConfig(stack.endpoint));
  const rule = { Name: `${SERVICE}-${stack.stage}-order-events`, EventBusName: `${SERVICE}-${stack.stage}` };
  await events.send(enabled ? new EnableRuleCommand(rule) : new DisableRuleCommand(rule));
}

/** A backlog committed at once: its events are the rows of seq `first` .. `last`. */
interface Backlog {
  first: string;
  last: string;
  count: number;
  committedAt: Date;
}

/**
 * `count` orders committed in one transaction, so they become ready at
 * once: their events' seq range, and the commit's time on the database's
 * clock (`created_at` is the transaction's start).
 */
async function backlog(count: number, prefix: string): Promise<Backlog> {
  const ids = await createOrders(
    pool,
    Array.from({ length: count }, (_, i) => ({
      customerId: `${prefix}-${i}`,
      totalCents: 100,
      currency: 'SEK',
    })),
  );
  const { rows } = await pool.query(
    `SELECT now() AS t, min(seq)::text AS first, max(seq)::text AS last, count(*)::int AS n
       FROM outbox_events WHERE id = ANY($1::uuid[])`,
    [ids],
  );
  if (rows[0].n !== count || BigInt(rows[0].last) - BigInt(rows[0].first) + 1n !== BigInt(count))
    throw new Error('the backlog is not one seq range of its own');
  return { first: rows[0].first, last: rows[0].last, count, committedAt: rows[0].t };
}

/**
 * Relay slots held, sampled while the backlog drains; resolves when none of
 * it is left. The unfinished rows are few and indexed: a cheap look.
 */
async function drained(b: Backlog, timeoutMs: number): Promise<{ most: number }> {
  const started = Date.now();
  let most = 0;
  for (;;) {
    const { rows } = await pool.query(
      `SELECT (SELECT count(*)::int FROM outbox_relay_slots WHERE held_until > now() AND holder <> '${PARKED_HOLDER}') AS held,
              (SELECT count(*)::int FROM outbox_events
                WHERE processed_at IS NULL AND seq BETWEEN $1 AND $2) AS left`,
      [b.first, b.last],
    );
    most = Math.max(most, rows[0].held);
    if (rows[0].left === 0) return { most };
    if (Date.now() - started > timeoutMs)
      throw new Error(`${rows[0].left} events left after ${timeoutMs / 60_000} minutes`);
    await sleep(200);
  }
}

/** Until every relay has returned (each then writes its REPORT line). */
async function relaysGone() {
  for (;;) {
    const { rows } = await pool.query(
      `SELECT count(*)::int AS n FROM outbox_relay_slots WHERE held_until > now() AND holder <> '${PARKED_HOLDER}'`,
    );
    if (rows[0].n === 0) break;
    await sleep(500);
  }
  await sleep(10_000);
}

const STEADY_SECONDS = Number(process.env.BENCH_ELASTIC_STEADY_SECONDS ?? 120);
const STEADY_PRODUCERS = 4;
const STEADY_RATES = String(process.env.BENCH_ELASTIC_STEADY_RATES ?? '1,10,100,1000')
  .split(',')
  .map(Number);
if (STEADY_RATES.some((rate) => !(rate > 0)))
  throw new Error(
    `BENCH_ELASTIC_STEADY_RATES: orders a second, comma-separated (got "${process.env.BENCH_ELASTIC_STEADY_RATES}")`,
  );

/**
 * A steady `rate` of orders a second for STEADY_SECONDS, from
 * STEADY_PRODUCERS producers, each with a waker of its own (as separate
 * processes would), starting with no relay running: what the relay billed
 * (every invocation from the start until the last relay returned, per hour
 * of writing), the relays running at once (sampled), and commit → published.
 * The consumer's mapping is off.
 */
async function steady(stack: DeployedStack, rate: number) {
  await consumerMapping(stack, false);
  await relaysGone();
  const tail = new LogTail(stack, 'relay', Date.now() - 120_000);
  await billed(tail, true);
  log(
    `steady: ${rate} orders a second for ${STEADY_SECONDS} s from ${STEADY_PRODUCERS} producers waking the relay…`,
  );
  const started = Date.now();
  const stopAt = started + STEADY_SECONDS * 1_000;
  const every = (STEADY_PRODUCERS * 1_000) / rate;
  const ids: string[] = [];
  const samples: number[] = [];
  let writing = true;
  const sampling = (async () => {
    while (writing) {
      const { rows } = await pool.query(
        `SELECT count(*)::int AS n FROM outbox_relay_slots WHERE held_until > now() AND holder <> '${PARKED_HOLDER}'`,
      );
      samples.push(rows[0].n);
      await sleep(250);
    }
  })();
  await Promise.all(
    Array.from({ length: STEADY_PRODUCERS }, async (_, p) => {
      const waker = createRelayWaker({
        functionName: stack.functionName('relay'),
        lambda: new LambdaClient({ ...emulatorClientConfig(stack.endpoint), maxAttempts: 1 }),
        db: pool, // no wake while a relay runs
      });
      await sleep((every / STEADY_PRODUCERS) * p);
      for (let next = Date.now(); next < stopAt; next += every) {
        const { eventId } = await createOrder(pool, {
          customerId: `steady-${p}`,
          totalCents: 100,
          currency: 'SEK',
        });
        ids.push(eventId);
        await waker.wake();
        await sleep(Math.max(0, next + every - Date.now()));
      }
    }),
  );
  writing = false;
  await sampling;
  const writtenMs = Date.now() - started;
  await relaysGone();
  const { gbSeconds, invocations } = await billed(tail);
  const { rows } = await pool.query(
    `SELECT extract(epoch FROM processed_at - created_at) * 1000 AS ms FROM outbox_events
      WHERE id = ANY($1::uuid[]) AND processed_at IS NOT NULL`,
    [ids],
  );
  if (rows.length < ids.length)
    throw new Error(`${ids.length - rows.length} events of the steady load unpublished`);
  const ms = rows.map((r) => Number(r.ms)).sort((a, b) => a - b);
  const result = {
    rate,
    events: ids.length,
    seconds: Math.round(writtenMs / 1000),
    // What the producers reached (a slow machine may fall short of `rate`).
    eventsPerSecond: Math.round((ids.length / writtenMs) * 1_000 * 10) / 10,
    relayGbSecondsPerHour: Math.round((gbSeconds / (writtenMs / 3_600_000)) * 10) / 10,
    relayInvocations: invocations,
    relaysAtOnce: {
      mean: Math.round((samples.reduce((a, b) => a + b, 0) / Math.max(1, samples.length)) * 100) / 100,
      most: Math.max(0, ...samples),
    },
    latencyMs: { p50: Math.round(percentile(ms, 50)), p99: Math.round(percentile(ms, 99)) },
  };
  log(`  ${JSON.stringify(result)}`);
  return result;
}

/**
 * CPU seconds of the relay's Lambda workers from now until `stop()`, polled
 * every 500 ms (a worker that ends loses at most that much).
 */
function relayCpu(emulator: StackEmulator, stack: DeployedStack) {
  const marker = stack.functionName('relay');
  const base = emulator.processCpuSeconds(marker);
  const last = new Map(base);
  const poll = () => {
    for (const [pid, seconds] of emulator.processCpuSeconds(marker)) last.set(pid, seconds);
  };
  const timer = setInterval(poll, 500);
  return {
    stop(): number {
      clearInterval(timer);
      poll();
      let total = 0;
      for (const [pid, seconds] of last) total += seconds - (base.get(pid) ?? 0);
      return total;
    },
  };
}

/** Lambda gives a function one vCPU at 1,769 MB, in proportion below: GB-seconds per CPU-second. */
const GB_S_PER_CPU_S = MB_PER_VCPU / 1024;

/**
 * Full load: a backlog of LOAD_EVENTS orders, one wake, the relays (scaling
 * out to maxRelays) drain it; their GB-seconds per million events published,
 * from the REPORT lines of every relay invocation until the slots are free
 * again. The deployed consumer's event source mapping is off meanwhile: in
 * AWS the consumer does not run on the relays' CPU, here it would share the
 * two cores with them and with MiniStack.
 */
async function loadCost(emulator: StackEmulator, stack: DeployedStack) {
  log(
    `full load: ${LOAD_EVENTS} orders in one transaction, one wake, the consumer's mapping off${args['bus-rule-on'] ? '' : ', the bus rule off'}…`,
  );
  await consumerMapping(stack, false);
  if (!args['bus-rule-on']) await busRule(stack, false);
  await relaysGone();
  await openClosedSlots();
  // Every relay invocation from here on counts (a schedule tick may start on the orders before the wake).
  const tail = new LogTail(stack, 'relay', Date.now() - 120_000);
  await billed(tail, true);
  const calibration = calibrationMs();
  const load = await backlog(LOAD_EVENTS, 'load');
  const cpu = relayCpu(emulator, stack);
  const serverCpuBefore = emulator.serverCpuSeconds();
  await invokeWake(stack);
  const { most } = await drained(load, 600_000);
  const serverCpuSeconds = emulator.serverCpuSeconds() - serverCpuBefore;
  const drainedMs = await drainMs(load);
  await relaysGone();
  const cpuSeconds = cpu.stop();
  const { gbSeconds, invocations, measured, billedMs, runs } = await billed(tail);
  await consumerMapping(stack, true);
  if (!args['bus-rule-on']) await busRule(stack, true);
  const perMillion = (gbSeconds / LOAD_EVENTS) * 1_000_000;
  log(
    `full load: ${LOAD_EVENTS} events in ${(drainedMs / 1000).toFixed(1)} s, ${invocations} relay invocations (at most ${most} at once; more relays raised the rate ${measured.raised}×, did not ${measured.notRaised}×, measured again ${measured.again}×), ${gbSeconds.toFixed(1)} GB-s → ${perMillion.toFixed(0)} GB-s per million`,
  );
  return {
    gbSecondsPerMillion: Math.round(perMillion),
    events: LOAD_EVENTS,
    drainSeconds: Math.round(drainedMs / 100) / 10,
    eventsPerSecond: Math.round(LOAD_EVENTS / (drainedMs / 1000)),
    relayInvocations: invocations,
    // Each invocation's billed ms, and each run's end (stoppedBecause:published).
    billedMs,
    runs,
    mostRelaysAtOnce: most,
    // Measured scale out: how often the relay that scaled found that the relays it started raised the rate, and did not.
    scaleOutMeasured: measured,
    gbSeconds: Math.round(gbSeconds * 10) / 10,
    // The relays' own CPU (their Lambda workers, Node 22, this machine's cores).
    relayCpuSecondsPerMillion: Math.round((cpuSeconds / LOAD_EVENTS) * 1_000_000),
    // In AWS a 512 MB function gets 512/1769 of a vCPU: a relay bound by
    // its CPU bills at least this per million events, whatever its memory.
    awsCpuBoundGbSecondsPerMillion: Math.round((cpuSeconds / LOAD_EVENTS) * 1_000_000 * GB_S_PER_CPU_S),
    // Cores kept busy over the drain: the relays' workers, and MiniStack's
    // server (the queue, the bus and IAM for every call). A server near one
    // core (Python) while the relays wait sets the pace, not the relays.
    relayCores: Math.round((cpuSeconds / (drainedMs / 1000)) * 100) / 100,
    emulatorServerCores: Math.round((serverCpuSeconds / (drainedMs / 1000)) * 100) / 100,
    // This machine's speed just before the backlog (bench/calibrate.ts): CPU
    // figures of runs on different days compare only scaled by it.
    calibrationMs: calibration,
  };
}

/** Commit → the last of the backlog published, on the database's clock. */
async function drainMs(b: Backlog): Promise<number> {
  const { rows } = await pool.query(
    'SELECT max(processed_at) AS last, count(processed_at)::int AS n FROM outbox_events WHERE seq BETWEEN $1 AND $2',
    [b.first, b.last],
  );
  if (rows[0].n !== b.count) throw new Error(`${b.count - rows[0].n} events of the backlog unpublished`);
  return (rows[0].last as Date).getTime() - b.committedAt.getTime();
}

/**
 * One drain of `count` events through the stack deployed with
 * `maxRelays`, every AWS call of the functions delayed by
 * SCALE_OUT_DELAY_MS at the proxy; the consumer's mapping off.
 */
async function scaleOutDrain(
  stack: DeployedStack,
  proxy: FaultProxy,
  maxRelays: number,
  count = SCALE_OUT_EVENTS,
) {
  await consumerMapping(stack, false);
  await relaysGone();
  await openClosedSlots();
  const tail = new LogTail(stack, 'relay', Date.now() - 120_000);
  await billed(tail, true);
  log(`scale out, maxRelays ${maxRelays}: ${count} orders in one transaction…`);
  // The machine's speed before the drain (the ratio follows it), taken
  // before the orders, as a schedule tick may start on them.
  const calibration = calibrationMs();
  const events = await backlog(count, `scale-${maxRelays}`);
  proxy.delayMs = SCALE_OUT_DELAY_MS;
  const calls = proxy.forwarded;
  try {
    await invokeWake(stack);
    const { most } = await drained(events, 1_200_000);
    const drainedMs = await drainMs(events);
    await relaysGone();
    const { gbSeconds, invocations, measured } = await billed(tail);
    log(
      `  maxRelays ${maxRelays} (more relays raised the rate ${measured.raised}×, did not ${measured.notRaised}×, measured again ${measured.again}×): drained in ${(drainedMs / 1000).toFixed(1)} s (${Math.round(count / (drainedMs / 1000))} events/s), ${invocations} relay invocations, at most ${most} at once, ${gbSeconds.toFixed(1)} GB-s`,
    );
    return {
      maxRelays,
      events: count,
      drainSeconds: Math.round(drainedMs / 100) / 10,
      eventsPerSecond: Math.round(count / (drainedMs / 1000)),
      relayInvocations: invocations,
      mostRelaysAtOnce: most,
      scaleOutMeasured: measured,
      gbSecondsPerMillion: Math.round((gbSeconds / count) * 1_000_000),
      callsThroughProxy: proxy.forwarded - calls,
      calibrationMs: calibration,
    };
  } finally {
    proxy.delayMs = 0;
  }
}

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

/**
 * Relay memory with Lambda's CPU share: MiniStack's function workers each
 * limited to memory / 1,769 of a core (scripts/local/lambda-cpu-share.ts),
 * as in AWS, then the full load at each memory size with the deployed
 * default maxRelays. Bound by the emulator, a relay bills memory × the
 * emulator's pace; bound by its own CPU share, about the same at any size.
 */
async function memorySizes(sizes: number[]) {
  const emulator = await startStackEmulator({ auth: true, nodeDir, log, cpuShare: true });
  emulators.push(emulator);
  const results = [];
  for (const memory of sizes) {
    log(
      `deploying the stack, relay ${memory} MB with its CPU share (${(memory / MB_PER_VCPU).toFixed(2)} of a core)…`,
    );
    const stack = await deploy(emulator, {
      relayMode: 'elastic',
      relayMemorySize: String(memory),
    });
    const load = await loadCost(emulator, stack);
    results.push({
      memoryMb: memory,
      cpuShare: Math.round((memory / MB_PER_VCPU) * 1000) / 1000,
      concurrency: RELAY_CONCURRENCY,
      fullLoad: load,
    });
  }
  await emulator.stop();
  // Waiting on the network: one relay, every AWS call 50 ms late (MiniStack
  // behind the fault proxy, as in the scale-out part).
  proxy = await FaultProxy.start(0);
  const fronted = await startStackEmulator({
    auth: true,
    nodeDir,
    log,
    cpuShare: true,
    frontPort: Number(new URL(proxy.endpoint).port),
  });
  emulators.push(fronted);
  proxy.forwardTo(fronted.endpoint);
  for (const result of results) {
    log(`deploying the stack behind the proxy, relay ${result.memoryMb} MB with its CPU share, maxRelays 1…`);
    const stack = await deploy(fronted, {
      relayMode: 'elastic',
      relayMemorySize: String(result.memoryMb),
      maxRelays: '1',
    });
    Object.assign(result, { network50ms: await scaleOutDrain(stack, proxy, 1, MEMORY_NETWORK_EVENTS) });
  }
  await fronted.stop();
  await proxy.stop();
  proxy = undefined;
  return results;
}

const count = (option: string, min: number) => {
  const n = Number(args[option as keyof typeof args]);
  if (!Number.isInteger(n) || n < min)
    throw new Error(`--${option}: "${args[option as keyof typeof args]}" is not a count ≥ ${min}`);
  return n;
};
const PAIRS = count('pairs', 1);
const DIRECT_CALLS_EVENTS = count('direct-calls-events', 1_000);
const HOT_EVENTS = count('hot-events', 100);
const DIRECT_CALLS_DELAY_MS = count('direct-calls-delay-ms', 0);
const DIRECT_CALLS_MEASURES = new Set(String(args['direct-calls-measures']).split(','));
for (const measure of DIRECT_CALLS_MEASURES) {
  if (!['one', 'four', 'hot'].includes(measure))
    throw new Error(`--direct-calls-measures: unknown measure "${measure}" (one, four, hot)`);
}

/**
 * Sets some of the deployed relay's environment variables, the rest as
 * deployed. MiniStack, as AWS, starts the function's workers afresh after
 * a change of its environment. Called with no relay running.
 */
async function relayEnvironment(stack: DeployedStack, vars: Record<string, string>) {
  const lambda = new LambdaClient(emulatorClientConfig(stack.endpoint));
  const FunctionName = stack.functionName('relay');
  const current = await lambda.send(new GetFunctionConfigurationCommand({ FunctionName }));
  await lambda.send(
    new UpdateFunctionConfigurationCommand({
      FunctionName,
      Environment: { Variables: { ...current.Environment?.Variables, ...vars } },
    }),
  );
  for (let i = 0; ; i++) {
    const { LastUpdateStatus, Environment } = await lambda.send(
      new GetFunctionConfigurationCommand({ FunctionName }),
    );
    const applied = Object.entries(vars).every(([k, v]) => Environment?.Variables?.[k] === v);
    if (applied && LastUpdateStatus !== 'InProgress') return;
    if (i > 120) throw new Error(`the relay's environment update did not finish (${LastUpdateStatus})`);
    await sleep(250);
  }
}

/** `count` events of one aggregate committed in one transaction: a hot aggregate's backlog. */
async function hotBacklog(count: number): Promise<Backlog> {
  const aggregateId = randomUUID();
  const ids = await withTransaction(pool, async (client) => {
    const ids: string[] = [];
    for (let i = 0; i < count; i += 1_000) {
      ids.push(
        ...(await orderEvents.enqueueMany(
          client,
          Array.from({ length: Math.min(1_000, count - i) }, (_, j) => ({
            type: 'order.created' as const,
            aggregateId,
            payload: { orderId: aggregateId, customerId: `hot-${i + j}`, totalCents: 100, currency: 'SEK' },
          })),
        )),
      );
    }
    return ids;
  });
  const { rows } = await pool.query(
    `SELECT now() AS t, min(seq)::text AS first, max(seq)::text AS last, count(*)::int AS n
       FROM outbox_events WHERE id = ANY($1::uuid[])`,
    [ids],
  );
  if (rows[0].n !== count || BigInt(rows[0].last) - BigInt(rows[0].first) + 1n !== BigInt(count))
    throw new Error('the hot backlog is not one seq range of its own');
  return { first: rows[0].first, last: rows[0].last, count, committedAt: rows[0].t };
}

/**
 * The stack's FIFO queue deleted and created again with its attributes
 * (same name, URL and ARN), so each drain starts with an empty queue.
 * MiniStack rebuilds a FIFO queue's dedupe cache (every id of the last 5
 * minutes) at each message it takes, so a drain right after another slowed
 * by the queue's history, not the relay: one aggregate's drains fell from
 * 223 to 47 events/s in a row.
 */
async function freshFifoQueue(stack: DeployedStack) {
  const sqs = new SQSClient(emulatorClientConfig(stack.endpoint));
  const QueueUrl = stack.outputs.OutboxFifoQueueUrl;
  if (!QueueUrl) throw new Error('the stack has no OutboxFifoQueueUrl output');
  const { Attributes = {} } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['All'] }),
  );
  const kept: QueueAttributeName[] = [
    'FifoQueue',
    'ContentBasedDeduplication',
    'DeduplicationScope',
    'FifoThroughputLimit',
    'RedrivePolicy',
    'VisibilityTimeout',
    'MessageRetentionPeriod',
    'ReceiveMessageWaitTimeSeconds',
    'DelaySeconds',
    'MaximumMessageSize',
  ];
  await sqs.send(new DeleteQueueCommand({ QueueUrl }));
  const created = await sqs.send(
    new CreateQueueCommand({
      QueueName: QueueUrl.split('/').pop(),
      Attributes: Object.fromEntries(
        kept.filter((k) => Attributes[k] !== undefined).map((k) => [k, Attributes[k]]),
      ),
    }),
  );
  if (created.QueueUrl?.split('/').pop() !== QueueUrl.split('/').pop())
    throw new Error(`the FIFO queue came back as ${created.QueueUrl}, not ${QueueUrl}`);
}

/**
 * One drain of a backlog made by `make` with direct calls `on` or off (the
 * relay's environment), as loadCost drains: one wake, the consumer's
 * mapping and the bus rule off. Commit → last published (what a user
 * waits), first → last published (the rate once running), the relays'
 * CPU per event, and what they billed.
 */
async function directDrain(
  emulator: StackEmulator,
  stack: DeployedStack,
  on: boolean,
  vars: Record<string, string>,
  make: () => Promise<Backlog>,
  before?: () => Promise<void>,
) {
  await relaysGone();
  await openClosedSlots();
  await before?.();
  await relayEnvironment(stack, { ...vars, OUTBOX_DIRECT_CALLS: String(on) });
  const tail = new LogTail(stack, 'relay', Date.now() - 120_000);
  await billed(tail, true);
  const calibration = calibrationMs();
  const events = await make();
  const cpu = relayCpu(emulator, stack);
  const serverCpuBefore = emulator.serverCpuSeconds();
  await invokeWake(stack);
  const { most } = await drained(events, 900_000);
  const serverCpuSeconds = emulator.serverCpuSeconds() - serverCpuBefore;
  const drainedMs = await drainMs(events);
  const { rows } = await pool.query(
    `SELECT extract(epoch FROM max(processed_at) - min(processed_at)) * 1000 AS ms
       FROM outbox_events WHERE seq BETWEEN $1 AND $2`,
    [events.first, events.last],
  );
  const publishingMs = Number(rows[0].ms);
  await relaysGone();
  const cpuSeconds = cpu.stop();
  const { gbSeconds, invocations } = await billed(tail);
  const result = {
    directCalls: on,
    events: events.count,
    drainSeconds: Math.round(drainedMs / 100) / 10,
    eventsPerSecond: Math.round(events.count / (drainedMs / 1000)),
    // First → last event published: the rate once the relays run (no cold start, no wake).
    publishingEventsPerSecond: Math.round(events.count / (publishingMs / 1000)),
    relayCpuMsPer1000: Math.round((cpuSeconds / events.count) * 1_000_000 * 10) / 10,
    gbSecondsPerMillion: Math.round((gbSeconds / events.count) * 1_000_000),
    relayInvocations: invocations,
    mostRelaysAtOnce: most,
    // MiniStack's server process (not found behind the proxy).
    ...(proxy
      ? {}
      : { emulatorServerCores: Math.round((serverCpuSeconds / (drainedMs / 1000)) * 100) / 100 }),
    calibrationMs: calibration,
    loadAverage: Math.round((os.loadavg()[0] ?? 0) * 100) / 100,
  };
  log(`  direct calls ${on ? 'on ' : 'off'}: ${JSON.stringify(result)}`);
  return result;
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

/**
 * PAIRS pairs of drains, direct calls on and off, the order alternating
 * (on, off; off, on; …) so that a drift of the machine weighs on both:
 * each drain, the medians, and on ÷ off of each figure.
 */
async function directPairs(
  label: string,
  emulator: StackEmulator,
  stack: DeployedStack,
  vars: Record<string, string>,
  make: () => Promise<Backlog>,
  before?: () => Promise<void>,
) {
  const drains: Awaited<ReturnType<typeof directDrain>>[] = [];
  for (let pair = 0; pair < PAIRS; pair++) {
    for (const on of pair % 2 === 0 ? [true, false] : [false, true]) {
      log(`${label}, pair ${pair + 1} of ${PAIRS}:`);
      drains.push(await directDrain(emulator, stack, on, vars, make, before));
    }
  }
  const of = (
    on: boolean,
    key: 'drainSeconds' | 'eventsPerSecond' | 'publishingEventsPerSecond' | 'relayCpuMsPer1000',
  ) => drains.filter((d) => d.directCalls === on).map((d) => d[key]);
  const summary = Object.fromEntries(
    (['eventsPerSecond', 'publishingEventsPerSecond', 'drainSeconds', 'relayCpuMsPer1000'] as const).map(
      (key) => {
        const on = of(true, key);
        const off = of(false, key);
        return [
          key,
          {
            on: median(on),
            off: median(off),
            on_over_off: Math.round((median(on) / median(off)) * 1000) / 1000,
            // The spread of each side: a difference inside it is noise.
            on_range: [Math.min(...on), Math.max(...on)],
            off_range: [Math.min(...off), Math.max(...off)],
          },
        ];
      },
    ),
  );
  log(`${label}: ${JSON.stringify(summary)}`);
  return { ...summary, drains };
}

/**
 * Direct calls on and off, side by side, the relay at 512 MB with its CPU
 * share where cgroups can be written (as in AWS; without it the relay has
 * the machine's cores, and the part says so). `--direct-calls-measures`
 * picks measures; with `--direct-calls-delay-ms` MiniStack sits behind the
 * fault proxy and every AWS call of the functions waits that long during
 * the drains (the network of AWS), and the figures' keys say so.
 */
async function directCallsPart() {
  const delayMs = DIRECT_CALLS_DELAY_MS;
  let cpuShare = true;
  let emulator: StackEmulator;
  if (delayMs > 0) {
    proxy = await FaultProxy.start(0);
  }
  const start = (share: boolean) =>
    startStackEmulator({
      auth: true,
      nodeDir,
      log,
      cpuShare: share,
      ...(proxy ? { frontPort: Number(new URL(proxy.endpoint).port) } : {}),
    });
  try {
    emulator = await start(true);
  } catch (error) {
    log(`direct calls: no CPU share here (${(error as Error).message}); measuring without it`);
    cpuShare = false;
    emulator = await start(false);
  }
  emulators.push(emulator);
  proxy?.forwardTo(emulator.endpoint);
  // The delay starts once the backlog is written (the bench's own calls go straight to MiniStack).
  const make = (build: () => Promise<Backlog>) => async () => {
    const events = await build();
    if (proxy) proxy.delayMs = delayMs;
    return events;
  };
  const suffix = delayMs > 0 ? `_network_${delayMs}ms` : '';
  const late = delayMs > 0 ? `, every AWS call ${delayMs} ms late` : '';
  const figures: Record<string, unknown> = {};
  try {
    if (DIRECT_CALLS_MEASURES.has('one') || DIRECT_CALLS_MEASURES.has('four')) {
      log('deploying the stack, relay 512 MB, relayMode elastic…');
      const stack = await deploy(emulator, { relayMode: 'elastic', relayMemorySize: '512' });
      await consumerMapping(stack, false);
      await busRule(stack, false);
      for (const [measure, maxRelays] of [
        ['one', 1],
        ['four', 4],
      ] as const) {
        if (!DIRECT_CALLS_MEASURES.has(measure)) continue;
        const pairs = await directPairs(
          `maxRelays ${maxRelays}, ${DIRECT_CALLS_EVENTS} events${late}`,
          emulator,
          stack,
          { OUTBOX_MAX_RELAYS: String(maxRelays) },
          make(() => backlog(DIRECT_CALLS_EVENTS, `direct-${maxRelays}`)),
        );
        figures[`${maxRelays === 1 ? 'one_relay' : 'max_relays_4'}${suffix}`] = {
          events: DIRECT_CALLS_EVENTS,
          max_relays: maxRelays,
          ...pairs,
        };
      }
    }
    if (DIRECT_CALLS_MEASURES.has('hot')) {
      log('deploying the stack, ordering aggregate (the FIFO queue)…');
      const stack = await deploy(emulator, {
        relayMode: 'elastic',
        relayMemorySize: '512',
        ordering: 'aggregate',
      });
      await consumerMapping(stack, false);
      await busRule(stack, false);
      const hot = await directPairs(
        `ordered, one aggregate, ${HOT_EVENTS} events${late}`,
        emulator,
        stack,
        {},
        make(() => hotBacklog(HOT_EVENTS)),
        () => freshFifoQueue(stack),
      );
      figures[`ordered_hot_aggregate${suffix}`] = {
        events: HOT_EVENTS,
        max_relays: Number(stageParamDefault('maxRelays')),
        ...hot,
      };
    }
  } finally {
    if (proxy) proxy.delayMs = 0;
  }
  await emulator.stop();
  await proxy?.stop();
  proxy = undefined;
  const date = new Date().toISOString();
  return {
    // Each measure's keys carry their run's date, machine and set-up.
    ...Object.fromEntries(
      Object.entries(figures).map(([key, value]) => [
        key,
        {
          date,
          machine: `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, node ${process.version}, MiniStack (local Lambda executor, Node 22), PostgreSQL on the same host`,
          cpu_share: cpuShare,
          setup: `the deployed stack, relay 512 MB${cpuShare ? ` held to its CPU share (${(512 / MB_PER_VCPU).toFixed(2)} of a core, cgroups)` : ' (no CPU share: cgroups could not be written)'}, ${RELAY_CONCURRENCY} calls in flight, each event to the queue and the bus, the consumer's mapping and the bus rule off${delayMs > 0 ? `, every AWS call of the functions ${delayMs} ms late (MiniStack behind the fault proxy)` : ''}; OUTBOX_DIRECT_CALLS switched in the function's environment; ${PAIRS} pairs of drains, alternating; a backlog committed in one transaction, one wake; drainSeconds: commit → last published (cold start included), publishingEventsPerSecond: first → last published`,
          ...(value as object),
        },
      ]),
    ),
    cpu_share: cpuShare,
  };
}

/**
 * The stack of stage local (no TLS to the local PostgreSQL); a redeploy
 * updates it. `--relay-concurrency` and `--relay-idle-tail-ms` (or their
 * defaults), unless `params` sets them.
 */
const deploy = (emulator: StackEmulator, params: Record<string, string>) =>
  deployStack({
    endpoint: emulator.endpoint,
    databaseUrl,
    stage: 'local',
    params: { relayConcurrency: String(RELAY_CONCURRENCY), relayIdleTailMs: String(IDLE_TAIL_MS), ...params },
  });

const figures: Record<string, unknown> = {};
const emulators: StackEmulator[] = [];
let proxy: FaultProxy | undefined;
try {
  if (parts.has('idle') || parts.has('wake') || parts.has('steady') || parts.has('load')) {
    const emulator = await startStackEmulator({ auth: true, nodeDir, log, cpuShare: args['cpu-share'] });
    emulators.push(emulator);
    log('deploying the stack, relayMode elastic…');
    let stack = await deploy(emulator, { relayMode: 'elastic' });
    let elasticIdle: Awaited<ReturnType<typeof idleCost>> | undefined;
    if (parts.has('idle')) {
      elasticIdle = await idleCost(stack, 'elastic');
      figures.idle_gb_s_per_hour = elasticIdle.gbSecondsPerHour;
      figures.idle_invocations = { elastic: elasticIdle.invocations };
    }
    if (parts.has('wake')) {
      const waker = createRelayWaker({
        functionName: stack.functionName('relay'),
        lambda: new LambdaClient({ ...emulatorClientConfig(stack.endpoint), maxAttempts: 1 }),
        db: pool, // no wake while a relay runs
      });
      log(`wake latency: ${WAKE_EVENTS} orders, one every 10 s, each followed by a wake…`);
      figures.wake_latency_ms = await latency(stack, WAKE_EVENTS, () => waker.wake());
      log(`  ${JSON.stringify(figures.wake_latency_ms)}`);
      log(`schedule alone: ${SCHEDULE_EVENTS} orders, one every 10 s, no wake…`);
      figures.schedule_latency_ms = await latency(stack, SCHEDULE_EVENTS, undefined);
      log(`  ${JSON.stringify(figures.schedule_latency_ms)}`);
    }
    if (parts.has('steady')) {
      const runs: Awaited<ReturnType<typeof steady>>[] = [];
      for (const rate of STEADY_RATES) runs.push(await steady(stack, rate));
      // Merged with earlier runs: an entry per rate, each with its date.
      const date = new Date().toISOString();
      const earlier = ((results0.elastic?.steady ?? []) as { rate: number }[]).filter(
        (e) => !runs.some((r) => r.rate === e.rate),
      );
      figures.steady = [...earlier, ...runs.map((r) => ({ ...r, date }))].sort((a, b) => a.rate - b.rate);
      // Issue 33's keys: GB-s and invocations per hour at each steady rate (`at_1_eps`, ...).
      const perHour = (r: (typeof runs)[number]) => (r.relayInvocations / Math.max(1, r.seconds)) * 3_600;
      figures.steady_gb_s_per_hour = Object.fromEntries(
        runs.map((r) => [`at_${r.rate}_eps`, r.relayGbSecondsPerHour]),
      );
      figures.steady_invocations_per_hour = Object.fromEntries(
        runs.map((r) => [`at_${r.rate}_eps`, Math.round(perHour(r))]),
      );
    }
    if (parts.has('load')) {
      const load = await loadCost(emulator, stack);
      figures.gb_s_per_million = load.gbSecondsPerMillion;
      figures.full_load = load;
      // The same with one relay: no relay waits for another's share of the two cores.
      log('redeploying the same stack, maxRelays 1…');
      stack = await deploy(emulator, { relayMode: 'elastic', maxRelays: '1' });
      const oneRelay = await loadCost(emulator, stack);
      figures.full_load_one_relay = oneRelay;
      // What a relay with a CPU of its own bills, bound by it: from the one
      // relay's CPU (four relays on two cores also share caches, and each has
      // a cold start of its own).
      figures.aws_cpu_bound_gb_s_per_million = oneRelay.awsCpuBoundGbSecondsPerMillion;
    }
    if (parts.has('idle')) {
      log('redeploying the same stack, relayMode always-on…');
      stack = await deploy(emulator, { relayMode: 'always-on' });
      const alwaysOnIdle = await idleCost(stack, 'always-on');
      figures.always_on_gb_s_per_hour = alwaysOnIdle.gbSecondsPerHour;
      figures.idle_invocations = { elastic: elasticIdle?.invocations, always_on: alwaysOnIdle.invocations };
    }
    await emulator.stop();
  }

  if (parts.has('scale-out')) {
    // A second MiniStack behind the proxy: every AWS call of the functions crosses it.
    proxy = await FaultProxy.start(0);
    const emulator = await startStackEmulator({
      auth: true,
      nodeDir,
      log,
      cpuShare: args['cpu-share'],
      frontPort: Number(new URL(proxy.endpoint).port),
    });
    emulators.push(emulator);
    proxy.forwardTo(emulator.endpoint);
    const drains = [];
    for (const maxRelays of [1, 4]) {
      log(`deploying the stack behind the proxy, relayMode elastic, maxRelays ${maxRelays}…`);
      const stack = await deploy(emulator, {
        relayMode: 'elastic',
        maxRelays: String(maxRelays),
        relayConcurrency: String(SCALE_OUT_CONCURRENCY),
      });
      drains.push(await scaleOutDrain(stack, proxy, maxRelays));
    }
    const [one, four] = drains as [(typeof drains)[0], (typeof drains)[0]];
    if (one.callsThroughProxy === 0 || four.callsThroughProxy === 0)
      throw new Error('no AWS call of the functions crossed the proxy: the delay was not applied');
    figures.scale_out_ratio = Math.round((one.drainSeconds / four.drainSeconds) * 100) / 100;
    figures.scale_out = {
      events: SCALE_OUT_EVENTS,
      delay_ms_per_aws_call: SCALE_OUT_DELAY_MS,
      relay_concurrency: SCALE_OUT_CONCURRENCY,
      drains,
    };
    await emulator.stop();
  }

  let directCalls: Awaited<ReturnType<typeof directCallsPart>> | undefined;
  if (parts.has('direct-calls')) directCalls = await directCallsPart();

  const results = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
  const before = results.elastic ?? {};
  if (directCalls) {
    // Merged with earlier runs: a key per measure (and network delay), each with its date.
    const { cpu_share: _, ...measures } = directCalls;
    figures.direct_calls = { ...(before.direct_calls ?? {}), ...measures };
  }
  if (parts.has('memory')) {
    // Merged with earlier runs: an entry per memory size and concurrency, each with its date.
    const date = new Date().toISOString();
    const fresh = (await memorySizes(RELAY_MEMORY_SIZES)).map((r) => ({ ...r, date }));
    const earlier = (before.relay_memory_cpu_share ?? []) as { memoryMb: number; concurrency?: number }[];
    figures.relay_memory_cpu_share = [
      ...earlier.filter(
        (e) => !fresh.some((f) => f.memoryMb === e.memoryMb && f.concurrency === (e.concurrency ?? 4)),
      ),
      ...fresh,
    ];
  }

  const machine = `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, node ${process.version}, MiniStack (local Lambda executor, Node 22)`;
  const elastic = {
    ...before,
    machine,
    // The machine each part last ran on (a run of some parts keeps the others' figures).
    machines: {
      ...(before.machines ?? {}),
      ...Object.fromEntries([...parts].map((p) => [p, machine])),
    },
    setup: `the deployed stack (serverless.yml) on MiniStack: relay 512 MB, ${RELAY_CONCURRENCY} AWS calls in flight per relay (scale out: ${SCALE_OUT_CONCURRENCY}), maxRelays 4, schedule rate(1 minute); idle ${IDLE_MINUTES} minutes per mode; a schedule tick that finds nothing at its first claim returns at once; wake: one order every 10 s, a woken relay's idle tail ${IDLE_TAIL_MS / 1000} s, the waker given the database (no wake while a relay holds a slot); full load and scale out: the backlog committed in one transaction, one wake, the consumer's event source mapping off${args['bus-rule-on'] ? '' : "; full load: the bus's rule to the consumer queue off (MiniStack delivers each entry before it answers PutEvents, AWS after)"}`,
    ...figures,
    // Which parts ran with the functions held to their CPU share (as in AWS).
    cpu_share: {
      ...(before.cpu_share ?? {}),
      ...Object.fromEntries(
        [...parts].map((p) => [
          p,
          p === 'memory' ||
            args['cpu-share'] === true ||
            (p === 'direct-calls' &&
              (figures.direct_calls as { cpu_share?: boolean } | undefined)?.cpu_share === true),
        ]),
      ),
    },
    dates: {
      ...(before.dates ?? {}),
      ...Object.fromEntries([...parts].map((p) => [p, new Date().toISOString()])),
    },
    targets: {
      idle_gb_s_per_hour: 40,
      wake_p50_ms: 300,
      wake_p99_ms: 2000,
      gb_s_per_million: 200,
      scale_out_ratio: 2.5,
      steady_gb_s_per_hour: { at_1_eps: 300, at_10_eps: 1000 },
    },
  };
  delete elastic.not_measured_yet;
  delete elastic.date;
  log(JSON.stringify(elastic, null, 2));
  results.elastic = elastic;
  fs.writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
} finally {
  for (const emulator of emulators) await emulator.stop();
  await proxy?.stop();
  await pool.end();
  await dropDatabase(postgres.adminUrl, 'outbox_bench_elastic').catch(() => {});
  await postgres.stop();
}
