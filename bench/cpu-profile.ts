/**
 * `npm run bench:cpu-profile`: where the relay spends its CPU. One drain of
 * the backlog in a child process, as bench/cpu-ab.ts drains it (each event to
 * a queue and a bus on MiniStack, direct calls, serverless.yml's relay
 * settings, the Lambda's bundle, Node 22), under V8's sampling profiler
 * (`--cpu-prof`). Prints the self time per source file of the bundle and the
 * hottest functions, and keeps the profile in .local/cpu-profile/ for
 * Chrome DevTools or speedscope.
 *
 * Options: --events (default 20,000), --top (functions listed, default 40).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { build } from 'esbuild';
import { freshBacklog, relayChildBuild, startRelayBench } from './relay-child.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const log = (line: string) => process.stderr.write(`${line}\n`);
const { values: args } = parseArgs({
  options: { events: { type: 'string', default: '20000' }, top: { type: 'string', default: '40' } },
});
const EVENTS = Number(args.events);
const work = path.join(ROOT, '.local/cpu-profile');
fs.rmSync(work, { recursive: true, force: true });
fs.mkdirSync(work, { recursive: true });
const bundle = path.join(work, 'child.mjs');
await build({ ...relayChildBuild(ROOT), outfile: bundle });

/** The bundle's lines → the source file esbuild put there (its `// path` comments). */
function moduleOfLine(): (line: number) => string {
  const starts: Array<[number, string]> = [];
  fs.readFileSync(bundle, 'utf8')
    .split('\n')
    .forEach((text, i) => {
      const m = /^\/\/ ((?:node_modules|lib|bench)\/\S+)$/.exec(text);
      if (m) starts.push([i, (m[1] as string).replace(/^node_modules\/(@[^/]+\/[^/]+|[^/]+)\/.*$/, '$1')]);
    });
  return (line) => {
    let lo = 0;
    let hi = starts.length - 1;
    let found = '(bundle head)';
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const [start, file] = starts[mid] as [number, string];
      if (start <= line) {
        found = file;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  };
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

const { pool, node22, childEnv, stop } = await startRelayBench('outbox_bench_cpu_profile', log);
try {
  await freshBacklog(pool, EVENTS);
  const { stdout } = await run(node22, ['--cpu-prof', '--cpu-prof-dir', work, bundle], {
    env: { ...process.env, ...childEnv },
    maxBuffer: 16 * 2 ** 20,
  });
  const r = JSON.parse(stdout.trim().split('\n').pop() as string);
  if (r.published !== EVENTS) throw new Error(`published ${r.published} of ${EVENTS}`);
  const cpuMsPer1000 = ((r.cpu_user_ms + r.cpu_system_ms) / r.published) * 1000;
  const file = fs.readdirSync(work).find((f) => f.endsWith('.cpuprofile')) as string;
  const profile = JSON.parse(fs.readFileSync(path.join(work, file), 'utf8')) as {
    nodes: ProfileNode[];
    samples: number[];
  };
  const moduleOf = moduleOfLine();
  const bundleUrl = `file://${bundle}`;
  const hits = new Map<number, number>();
  for (const id of profile.samples) hits.set(id, (hits.get(id) ?? 0) + 1);
  const total = profile.samples.length;
  const byModule = new Map<string, number>();
  const byFunction = new Map<string, number>();
  for (const node of profile.nodes) {
    const n = hits.get(node.id) ?? 0;
    if (n === 0) continue;
    const { functionName, url: where, lineNumber } = node.callFrame;
    const module =
      where === bundleUrl
        ? moduleOf(lineNumber)
        : where
          ? where.replace(/^.*\/(node:)?/, 'node:')
          : functionName;
    byModule.set(module, (byModule.get(module) ?? 0) + n);
    const key = `${functionName || '(anonymous)'}  ${module}${where === bundleUrl ? `:${lineNumber + 1}` : ''}`;
    byFunction.set(key, (byFunction.get(key) ?? 0) + n);
  }
  const pct = (n: number) => `${((n / total) * 100).toFixed(1).padStart(5)}%`;
  log(`\n${EVENTS} events, ${cpuMsPer1000.toFixed(1)} ms CPU per 1,000; ${total} samples; profile: ${file}`);
  log('\nself time by source:');
  for (const [k, n] of [...byModule].sort((a, b) => b[1] - a[1]).slice(0, 25)) log(`${pct(n)}  ${k}`);
  log('\nhottest functions (self time):');
  for (const [k, n] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, Number(args.top)))
    log(`${pct(n)}  ${k}`);
} finally {
  await stop();
}
