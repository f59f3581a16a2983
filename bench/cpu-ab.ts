/**
 * `npm run bench:cpu-ab -- --base <git revision>`: the relay's CPU per event,
 * this checkout against another revision, in one run.
 *
 * The machines these benchmarks run on share their cores: the same code
 * measured 2.5× slower one afternoon than that morning (bench/calibrate.ts),
 * so a change's effect on CPU shows only when both sides run side by side.
 * This builds bench/db-cost-child.ts as one bundle from the working tree and
 * one from `--base` (checked out into .local/cpu-ab), the way the Lambda is
 * bundled, and alternates drains of the same backlog: each event to a queue
 * and a bus on MiniStack, direct calls, serverless.yml's relay settings,
 * Node 22. Prints the medians and their ratio and merges them into
 * bench/results.json (`cpu_ab`).
 *
 * Options: --base (required), --events (per drain, default 20,000), --rounds
 * (pairs of drains, default 5). The base's relay runs against this
 * checkout's schema: compare revisions whose relay reads it.
 */
import { execFile, execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { CreateEventBusCommand, EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { CreateQueueCommand, SQSClient } from '@aws-sdk/client-sqs';
import { build } from 'esbuild';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { startLocalAws, useLocalAwsEnv } from '../scripts/local/aws-emulator.js';
import { ensureNode22 } from '../scripts/local/node22.js';
import { dropDatabase, ensureDatabase, startLocalPostgres } from '../scripts/local/postgres.js';
import { insertBacklog } from './backlog.js';
import { calibrationMs } from './calibrate.js';
import { DEPLOYED_RELAY, relayChildBuild } from './relay-child.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const RESULTS = new URL('./results.json', import.meta.url);
const log = (line: string) => process.stderr.write(`${line}\n`);
const { values: args } = parseArgs({
  options: {
    base: { type: 'string' },
    events: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '5' },
  },
});
if (!args.base)
  throw new Error('--base <git revision> is required: the revision to compare this checkout with');
const EVENTS = Number(args.events);
const ROUNDS = Number(args.rounds);
const baseCommit = execFileSync('git', ['rev-parse', '--short', `${args.base}^{commit}`], { cwd: ROOT })
  .toString()
  .trim();
const headCommit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT }).toString().trim();
const dirty = execFileSync('git', ['status', '--porcelain', '--', 'lib', 'bench'], { cwd: ROOT })
  .toString()
  .trim();

async function bundle(sourceRoot: string, outfile: string) {
  // Packages from this checkout's node_modules for both sides.
  await build({ ...relayChildBuild(sourceRoot), nodePaths: [path.join(ROOT, 'node_modules')], outfile });
}

const work = path.join(ROOT, '.local/cpu-ab');
const baseTree = path.join(work, `tree-${baseCommit}`);
fs.mkdirSync(work, { recursive: true });
if (!fs.existsSync(baseTree)) {
  fs.mkdirSync(baseTree, { recursive: true });
  // The base's files only, no git metadata: `git archive | tar -x`.
  execFileSync('sh', ['-c', `git archive ${baseCommit} lib bench package.json | tar -x -C '${baseTree}'`], {
    cwd: ROOT,
  });
}
const bundles = {
  head: path.join(work, 'child-head.mjs'),
  base: path.join(work, `child-${baseCommit}.mjs`),
};
log(
  `bundling the relay child: this checkout (${headCommit}${dirty ? ' + uncommitted changes' : ''}) and ${baseCommit}…`,
);
await bundle(ROOT, bundles.head);
await bundle(baseTree, bundles.base);

const postgres = await startLocalPostgres({ log });
const url = await ensureDatabase(postgres.adminUrl, 'outbox_bench_cpu_ab');
await migrate({ databaseUrl: url });
const pool = new pg.Pool({ connectionString: url, max: 4 });
const node22 = ensureNode22(log);
const aws = await startLocalAws({ emulator: 'ministack', log });
useLocalAwsEnv(aws.endpoint);
try {
  const { QueueUrl } = await new SQSClient({}).send(
    new CreateQueueCommand({ QueueName: `cpu-ab-${randomUUID().slice(0, 8)}` }),
  );
  const busName = `cpu-ab-${randomUUID().slice(0, 8)}`;
  await new EventBridgeClient({}).send(new CreateEventBusCommand({ Name: busName }));

  async function drain(side: 'head' | 'base'): Promise<number> {
    await pool.query('TRUNCATE outbox_events');
    await insertBacklog(pool, EVENTS);
    await pool.query('VACUUM ANALYZE outbox_events');
    const { stdout } = await run(node22, [bundles[side]], {
      env: {
        ...process.env,
        DATABASE_URL: url,
        PUBLISHER: 'both',
        QUEUE_URL: QueueUrl as string,
        BUS_NAME: busName,
        DIRECT_CALLS: '1',
        RELAY: JSON.stringify(DEPLOYED_RELAY.relay),
        CONCURRENCY: String(DEPLOYED_RELAY.concurrency),
      },
      maxBuffer: 16 * 2 ** 20,
    });
    const r = JSON.parse(stdout.trim().split('\n').pop() as string);
    if (r.published !== EVENTS) throw new Error(`${side}: published ${r.published} of ${EVENTS}`);
    const ms = ((r.cpu_user_ms + r.cpu_system_ms) / r.published) * 1000;
    log(`  ${side === 'head' ? headCommit : baseCommit}: ${ms.toFixed(1)} ms CPU per 1,000 events`);
    return ms;
  }

  const calibration = calibrationMs();
  const runs = { head: [] as number[], base: [] as number[] };
  for (let i = 0; i < ROUNDS; i++) {
    // Alternating which goes first, so neither always runs on a warmer machine.
    const order: Array<'head' | 'base'> = i % 2 === 0 ? ['base', 'head'] : ['head', 'base'];
    for (const side of order) runs[side].push(await drain(side));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
  const round = (n: number) => Math.round(n * 10) / 10;
  const result = {
    date: new Date().toISOString(),
    machine: `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, MiniStack (${aws.source}), relay on Node 22`,
    setup: `${EVENTS} events per drain, each to a queue and a bus, direct calls, batch ${DEPLOYED_RELAY.relay.batchSize}, ${DEPLOYED_RELAY.relay.workers} workers, concurrency ${DEPLOYED_RELAY.concurrency}; ${ROUNDS} pairs of drains, alternating`,
    head: `${headCommit}${dirty ? ' + uncommitted changes' : ''}`,
    base: baseCommit,
    calibration_ms: calibration,
    cpu_ms_per_1000: { head: round(median(runs.head)), base: round(median(runs.base)) },
    ratio: Math.round((median(runs.head) / median(runs.base)) * 1000) / 1000,
    runs: { head: runs.head.map(round), base: runs.base.map(round) },
  };
  log(JSON.stringify(result, null, 2));
  const results = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
  results.cpu_ab = result;
  fs.writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
} finally {
  await aws.stop();
  await pool.end();
  await dropDatabase(postgres.adminUrl, 'outbox_bench_cpu_ab').catch(() => {});
  await postgres.stop();
}
