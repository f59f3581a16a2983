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
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
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
import { DEPLOYED_RELAY, relayChildBuild } from './relay-child.js';

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

const postgres = await startLocalPostgres({ log });
const url = await ensureDatabase(postgres.adminUrl, 'outbox_bench_cpu_profile');
await migrate({ databaseUrl: url });
const pool = new pg.Pool({ connectionString: url, max: 4 });
const node22 = ensureNode22(log);
const aws = await startLocalAws({ emulator: 'ministack', log });
useLocalAwsEnv(aws.endpoint);
try {
  const { QueueUrl } = await new SQSClient({}).send(
    new CreateQueueCommand({ QueueName: `cpu-profile-${randomUUID().slice(0, 8)}` }),
  );
  const busName = `cpu-profile-${randomUUID().slice(0, 8)}`;
  await new EventBridgeClient({}).send(new CreateEventBusCommand({ Name: busName }));
  await pool.query('TRUNCATE outbox_events');
  await insertBacklog(pool, EVENTS);
  await pool.query('VACUUM ANALYZE outbox_events');
  const { stdout } = await run(node22, ['--cpu-prof', '--cpu-prof-dir', work, bundle], {
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
  await aws.stop();
  await pool.end();
  await dropDatabase(postgres.adminUrl, 'outbox_bench_cpu_profile').catch(() => {});
  await postgres.stop();
}
