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
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { build } from 'esbuild';
import { calibrationMs } from './calibrate.js';
import { DEPLOYED_RELAY, freshBacklog, relayChildBuild, startRelayBench } from './relay-child.js';

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

const { pool, node22, aws, childEnv, stop } = await startRelayBench('outbox_bench_cpu_ab', log);
try {
  async function drain(side: 'head' | 'base'): Promise<number> {
    await freshBacklog(pool, EVENTS);
    const { stdout } = await run(node22, [bundles[side]], {
      env: { ...process.env, ...childEnv },
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
  await stop();
}
