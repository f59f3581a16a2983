/**
 * `npm run chaos`: the fault-injection suite. For each mode (standard queue,
 * then FIFO with per-aggregate ordering) it starts three relay processes
 * running the deployed relay handler, writes events in transactions (some
 * rolled back), and meanwhile kills relays, terminates their database
 * connections, pauses the AWS emulator, takes the EventBridge target down and
 * runs redrives, all at random from a printed seed. Then it lets the relays
 * drain, receives every message and checks that nothing committed was lost,
 * nothing rolled back was published, nothing is stuck, and (FIFO) every
 * aggregate arrived in commit order. Writes bench/chaos.json; exits 1 when a
 * check fails. See docs/fault-injection.md.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { Command, InvalidArgumentError } from 'commander';
import pg from 'pg';
import type { ConsumerFleet } from './chaos/consumers.js';
import type { FaultInjector, FaultTiming } from './chaos/faults.js';
import type { RelayFleet } from './chaos/relays.js';
import { resultTable } from './chaos/report.js';
import { createRng } from './chaos/rng.js';
import {
  type ChaosMode,
  CONSUMER_SETTINGS,
  type ModeResult,
  type ModeSettings,
  RELAY_SETTINGS,
  runMode,
} from './chaos/scenario.js';
import { startStackEmulator, useLocalAwsEnv } from './local/aws-emulator.js';
import { startLocalPostgres } from './local/postgres.js';

const integer = (min: number, max: number) => (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new InvalidArgumentError(`expected an integer from ${min} to ${max}`);
  return n;
};

const opts = new Command()
  .name('npm run chaos --')
  .description(
    'Fault injection: relays killed, connections dropped, emulator paused, a target down; then check every event.',
  )
  .option(
    '--seed <n>',
    'seed of the producer and the fault schedule (default: random, printed)',
    integer(0, 2 ** 31 - 1),
  )
  .option('--short', 'the CI size: about 2 minutes for both modes')
  .option('--mode <mode>', 'standard | fifo | both', 'both')
  .option(
    '--events <n>',
    'committed events in the standard mode (default 21000, --short 2500)',
    integer(10, 1_000_000),
  )
  .option(
    '--fifo-events <n>',
    'committed events in the FIFO mode (default 5000, --short 1200)',
    integer(10, 1_000_000),
  )
  .option(
    '--duration <s>',
    'seconds of writing (and faults) per mode (default 150 / 90, --short 30 / 25)',
    integer(1, 3600),
  )
  .option('--no-faults', 'sanity run: the same traffic without faults')
  .option(
    '--broken-relay',
    'a single relay that reports events published without sending them: the run must fail',
  )
  .option(
    '--broken-consumer',
    "consumers whose handler writes outside the consumer's transaction: the run must fail (handled_twice)",
  )
  .option('--published-rows <mode>', 'keep | delete: OUTBOX_PUBLISHED_ROWS of the relays', 'keep')
  .option(
    '--out <file>',
    'where to write the results (default bench/chaos.json; --short: .local/chaos-short.json)',
  )
  .parse()
  .opts<{
    seed?: number;
    short?: boolean;
    mode: string;
    events?: number;
    fifoEvents?: number;
    duration?: number;
    faults: boolean;
    brokenRelay?: boolean;
    brokenConsumer?: boolean;
    publishedRows: string;
    out?: string;
  }>();

if (!['standard', 'fifo', 'both'].includes(opts.mode)) {
  console.error(`--mode: expected standard, fifo or both (got "${opts.mode}")`);
  process.exit(2);
}
if (opts.publishedRows !== 'keep' && opts.publishedRows !== 'delete') {
  console.error(`--published-rows: expected keep or delete (got "${opts.publishedRows}")`);
  process.exit(2);
}
const publishedRows: 'keep' | 'delete' = opts.publishedRows;
// The SDK's notice that its 2027 releases need Node 22 (CI sets the same).
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const seed = opts.seed ?? Math.floor(Math.random() * 2 ** 31);
const short = opts.short === true;
const say = (line: string) => process.stderr.write(`${line}\n`);
const runStarted = new Date();
const logDir = path.resolve('.local', 'chaos', runStarted.toISOString().replace(/[:.]/g, '-'));

const timing: FaultTiming = short
  ? { gapMs: [1_500, 4_000], pauseMs: [2_000, 5_000], outageMs: [3_000, 8_000], downMs: [500, 2_000] }
  : { gapMs: [2_000, 6_000], pauseMs: [2_000, 8_000], outageMs: [5_000, 20_000], downMs: [500, 3_000] };
// Poison (no route: dead-lettered at once), large payloads (S3) and handler
// failures on first delivery are traffic; the crash poison is a fault.
const traffic = { poisonRate: 0.005, largeRate: 0.004, consumerFailPerMille: 30 };
const modes: ModeSettings[] = [
  {
    mode: 'standard' as ChaosMode,
    events: opts.events ?? (short ? 2_500 : 21_000),
    produceMs: (opts.duration ?? (short ? 30 : 150)) * 1000,
    aggregates: 2_000,
    faults: opts.faults,
    timing,
    drainTimeoutMs: short ? 60_000 : 120_000,
    brokenRelay: opts.brokenRelay ? 1 : undefined,
    publishedRows,
    ...traffic,
    brokenConsumer: opts.brokenConsumer === true,
    crashAt: short ? [0.05] : [0.05, 0.4],
  },
  {
    mode: 'fifo' as ChaosMode,
    events: opts.fifoEvents ?? (short ? 1_200 : 5_000),
    produceMs: (opts.duration ?? (short ? 25 : 90)) * 1000,
    aggregates: 200,
    faults: opts.faults,
    timing,
    drainTimeoutMs: short ? 60_000 : 120_000,
    brokenRelay: opts.brokenRelay ? 1 : undefined,
    publishedRows,
    ...traffic,
    brokenConsumer: opts.brokenConsumer === true,
    crashAt: short ? [0.05] : [0.05, 0.4],
  },
].filter((m) => opts.mode === 'both' || m.mode === opts.mode);

// --- cleanup: every child by the pid we started, on any exit ------------------
const live: { fleet?: RelayFleet; consumers?: ConsumerFleet; faults?: FaultInjector; emulatorPid?: number } =
  {};
function killChildrenNow() {
  live.faults?.resumeNow();
  live.fleet?.killAllNow();
  live.consumers?.killAllNow();
  if (live.emulatorPid) {
    try {
      process.kill(live.emulatorPid, 'SIGCONT');
      process.kill(live.emulatorPid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}
process.on('exit', killChildrenNow);
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    say(`\n${signal}: stopping relays and the emulator`);
    killChildrenNow();
    void postgres?.stop().finally(() => process.exit(130));
    setTimeout(() => process.exit(130), 5_000).unref();
  });
}

// --- infrastructure ------------------------------------------------------------
say(`chaos: seed ${seed}${short ? ' (short)' : ''}; replay with --seed ${seed}`);
const postgres = await startLocalPostgres({ log: say });
if (process.env.AWS_ENDPOINT_URL) {
  say('the suite must own the AWS emulator process (to pause it); unset AWS_ENDPOINT_URL');
  process.exit(2);
}
// MiniStack with the services the run uses (S3 for the large payloads), no
// IAM enforcement and no functions deployed: the relays and consumers are
// processes of this suite.
const aws = await startStackEmulator({
  auth: false,
  env: { SERVICES: 'sqs,events,s3' },
  log: say,
});
live.emulatorPid = aws.pid;
useLocalAwsEnv(aws.endpoint);
const clientConfig = { maxAttempts: 3 };
const sqs = new SQSClient(clientConfig);
const eventBridge = new EventBridgeClient(clientConfig);
const s3 = new S3Client({ ...clientConfig, forcePathStyle: true });
say(`PostgreSQL (${postgres.source}); AWS emulator ministack pid ${aws.pid} at ${aws.endpoint}`);

const results: ModeResult[] = [];
const rng = createRng(seed);
try {
  for (const settings of modes) {
    results.push(
      await runMode(
        {
          adminUrl: postgres.adminUrl,
          awsEndpoint: aws.endpoint,
          emulatorPid: aws.pid,
          sqs,
          eventBridge,
          s3,
          rng,
          logDir,
          say,
          register: (parts) => Object.assign(live, parts),
        },
        settings,
      ),
    );
  }
} finally {
  live.fleet = undefined;
  live.consumers = undefined;
  await aws.stop();
  live.emulatorPid = undefined;
}

// --- report ----------------------------------------------------------------------
async function postgresVersion(): Promise<string> {
  const client = new pg.Client({ connectionString: postgres.adminUrl });
  await client.connect();
  try {
    return (await client.query('SHOW server_version')).rows[0].server_version;
  } finally {
    await client.end();
  }
}
// CHAOS_GIT_COMMIT names the commit when the suite runs from an exported tree (git archive).
const gitCommit = (() => {
  if (process.env.CHAOS_GIT_COMMIT) return process.env.CHAOS_GIT_COMMIT;
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return undefined;
  }
})();
/** Product files that differ from the commit: the run tested those edits, not the commit alone. */
const uncommitted = (() => {
  if (process.env.CHAOS_GIT_COMMIT) return 0;
  try {
    return execFileSync('git', ['status', '--porcelain', '--', 'lib', 'functions', 'migrations'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    })
      .split('\n')
      .filter(Boolean).length;
  } catch {
    return undefined;
  }
})();
const passed = results.every((r) => r.passed);
const report = {
  passed,
  seed,
  short,
  faults: opts.faults,
  broken_relay: opts.brokenRelay === true,
  broken_consumer: opts.brokenConsumer === true,
  started_at: runStarted.toISOString(),
  duration_s: Math.round((Date.now() - runStarted.getTime()) / 1000),
  git_commit: gitCommit,
  uncommitted_product_files: uncommitted,
  machine: {
    cpus: os.cpus().length,
    cpu: os.cpus()[0]?.model.trim(),
    memory_gib: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    postgres: `${await postgresVersion()} (${postgres.source})`,
    aws_emulator: 'MiniStack 1.5.33, same host',
  },
  relay_settings: {
    relays: RELAY_SETTINGS.relays,
    invocation_budget_ms: RELAY_SETTINGS.budgetMs,
    ...RELAY_SETTINGS.env,
    OUTBOX_PUBLISHED_ROWS: publishedRows,
  },
  consumer_settings: {
    processes: CONSUMER_SETTINGS.processes,
    pollers_per_process: CONSUMER_SETTINGS.loops,
    consumers: { 'chaos-skip': 'replays: skip', 'chaos-handle': 'replays: handle' },
    visibility_timeout_s: CONSUMER_SETTINGS.visibilityTimeoutS,
    handler_fails_first_delivery_per_mille: traffic.consumerFailPerMille,
  },
  traffic: { poison_no_route_rate: traffic.poisonRate, large_payload_rate: traffic.largeRate },
  logs: path.relative(process.cwd(), logDir),
  modes: Object.fromEntries(results.map((r) => [r.mode, r])),
};
await postgres.stop();

const out = opts.out ?? (short ? '.local/chaos-short.json' : 'bench/chaos.json');
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);

console.log(
  `\nchaos: seed ${seed}, ${report.duration_s} s, commit ${gitCommit ?? '?'}${uncommitted ? ` + ${uncommitted} uncommitted product files` : ''}\n`,
);
console.log(resultTable(results));
for (const r of results) {
  if (r.passed) continue;
  console.log(`\n${r.mode} FAILED: ${r.failures.join(', ')}`);
  for (const [kind, lines] of Object.entries(r.samples))
    for (const l of lines) console.log(`  ${kind}: ${l}`);
}
console.log(`\nresults: ${out}; relay logs: ${report.logs}`);
console.log(passed ? 'chaos: PASSED' : 'chaos: FAILED');
process.exitCode = passed ? 0 : 1;
