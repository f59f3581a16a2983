/**
 * `npm run bench:db-cost` (part of `npm run bench`): what the outbox costs where it runs.
 *
 * - db_ms_per_1000: the database's own time (pg_stat_statements: execution +
 *   planning) for the relay's claim and outcome statements per 1,000 events
 *   relayed, beside the article's relay (bench/baseline.ts) on the same
 *   backlog. Null publisher, so only the database work differs. Beside it:
 *   cleanup deleting those rows later, and the relay with
 *   OUTBOX_PUBLISHED_ROWS=delete (no later cleanup of outbox rows).
 * - cpu_ms_per_1000: the relay process's user + system CPU per 1,000 events
 *   published to MiniStack's SQS and EventBridge, measured inside a child
 *   process (bench/db-cost-child.ts) so the emulator's CPU is not counted;
 *   `both_direct_node22` as the reference stack runs it (each event to the
 *   queue and the bus, direct calls, serverless.yml's relay settings, Node 22).
 * - held_xmin: drain rate of a 100,000-event backlog while another session
 *   holds a snapshot taken before the backlog was written, over the rate
 *   without it, and the table's and indexes' growth in both cases.
 *
 * It starts a PostgreSQL of its own (initdb from /usr/local/bin, a free port,
 * shared_preload_libraries=pg_stat_statements), so the figures do not depend
 * on the shared server's settings or its other users. Merges its keys into
 * bench/results.json (db_ms_per_1000, cpu_ms_per_1000, held_xmin, db_cost_run)
 * and leaves the others as they are.
 *
 * Env: BENCH_BACKLOG (default 100,000), BENCH_CPU_BACKLOG (events per CPU
 * drain, default 30,000), BENCH_CPU_REPEAT (rounds of CPU drains, default 3),
 * BENCH_HELD_TIME_BOX_S (longest drain with the held snapshot, default 300),
 * BENCH_HELD_REPEAT (pairs of held-snapshot drains, default 2), BENCH_SKIP=cpu,db,held (parts to skip),
 * BENCH_PROFILE=1 (also writes CPU profiles of the SQS and EventBridge
 * drains to .local/bench/profiles and prints their top self-time functions).
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { CreateEventBusCommand, EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { CreateQueueCommand, SQSClient } from '@aws-sdk/client-sqs';
import { build } from 'esbuild';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { runCleanup } from '../lib/operations/cleanup.js';
import { startLocalAws, useLocalAwsEnv } from '../scripts/local/aws-emulator.js';
import { freePort } from '../scripts/local/free-port.js';
import { ensureNode22 } from '../scripts/local/node22.js';
import { insertBacklog } from './backlog.js';
import { baselineBatch } from './baseline.js';
import { calibrationMs } from './calibrate.js';
import { DEPLOYED_RELAY, relayChildBuild } from './relay-child.js';

const run = promisify(execFile);
const BACKLOG = Number(process.env.BENCH_BACKLOG ?? 100_000);
const CPU_BACKLOG = Number(process.env.BENCH_CPU_BACKLOG ?? 30_000);
const CPU_REPEAT = Number(process.env.BENCH_CPU_REPEAT ?? 3);
const HELD_TIME_BOX_S = Number(process.env.BENCH_HELD_TIME_BOX_S ?? 300);
const HELD_REPEAT = Number(process.env.BENCH_HELD_REPEAT ?? 2);
const SKIP = new Set((process.env.BENCH_SKIP ?? '').split(',').filter(Boolean));
const PROFILE = process.env.BENCH_PROFILE === '1';
/** The relay settings of bench/run.ts. */
const RELAY = { batchSize: 500, workers: 4, safetyMarginMs: 0 };
const RESULTS = new URL('./results.json', import.meta.url);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const log = (line: string) => process.stderr.write(`${line}\n`);
const round = (n: number, digits = 1) => +n.toFixed(digits);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

// --- a PostgreSQL of our own, with pg_stat_statements -----------------------
/** Server settings: PostgreSQL's defaults but for these (the shared server's shared_buffers). */
const SERVER_SETTINGS: Record<string, string> = {
  shared_preload_libraries: 'pg_stat_statements',
  'pg_stat_statements.track_planning': 'on',
  'pg_stat_statements.max': '1000',
  shared_buffers: '128MB',
  max_connections: '50',
  listen_addresses: '127.0.0.1',
  unix_socket_directories: '',
};

async function startServer(): Promise<{ url: string; pid: number; stop: () => Promise<void> }> {
  const bin = '/usr/local/bin';
  // PostgreSQL refuses to run as root: as root, initdb and the server run as `postgres`.
  const owner =
    process.getuid?.() === 0
      ? (() => {
          const line = fs
            .readFileSync('/etc/passwd', 'utf8')
            .split('\n')
            .find((l) => l.startsWith('postgres:'));
          if (!line) throw new Error('running as root needs a `postgres` user for the bench server');
          const [, , uid, gid] = line.split(':');
          return { uid: Number(uid), gid: Number(gid) };
        })()
      : undefined;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-db-cost-'));
  if (owner) fs.chownSync(dir, owner.uid, owner.gid);
  const dataDir = path.join(dir, 'data');
  const env = { ...process.env, LC_ALL: 'C' };
  await run(
    `${bin}/initdb`,
    ['-D', dataDir, '-U', 'postgres', '--auth=trust', '--locale=C', '--encoding=UTF8', '--no-sync'],
    { ...owner, cwd: dir, env },
  );
  const port = await freePort();
  const args = ['-D', dataDir, '-p', String(port)];
  for (const [name, value] of Object.entries(SERVER_SETTINGS)) args.push('-c', `${name}=${value}`);
  const server = spawn(`${bin}/postgres`, args, {
    ...owner,
    cwd: dir,
    env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  server.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  for (let i = 0; ; i++) {
    if (server.exitCode !== null) throw new Error(`bench PostgreSQL exited:\n${stderr}`);
    const client = new pg.Client({ connectionString: url });
    try {
      await client.connect();
      await client.end();
      break;
    } catch {
      await client.end().catch(() => {});
      if (i > 300) throw new Error(`bench PostgreSQL did not start:\n${stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  return {
    url,
    pid: server.pid as number,
    stop: async () => {
      if (server.exitCode === null) {
        const exited = new Promise((resolve) => server.once('exit', resolve));
        server.kill('SIGINT'); // fast shutdown
        await exited;
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

const server = await startServer();
const admin = new pg.Client({ connectionString: server.url });
await admin.connect();
await admin.query('CREATE DATABASE outbox_db_cost');
await admin.end();
const url = server.url.replace(/\/postgres$/, '/outbox_db_cost');
await migrate({ databaseUrl: url });
const pool = new pg.Pool({ connectionString: url, max: 10 });
await pool.query('CREATE EXTENSION pg_stat_statements');
const serverVersion = (await pool.query('SHOW server_version')).rows[0].server_version as string;

/** The backlog of bench/run.ts: ~250-byte payloads, 50 aggregates. */
const fillBacklog = (count: number, db: Pick<pg.Pool, 'query'> = pool) => insertBacklog(db, count);

/** An empty table (a new file: TRUNCATE), then the backlog, vacuumed and analyzed. */
async function freshBacklog(count: number) {
  await pool.query('TRUNCATE outbox_events');
  await fillBacklog(count);
  await pool.query('VACUUM ANALYZE outbox_events');
}

// --- the relay in a child process, bundled as the Lambda is -----------------
const childBundle = path.join(ROOT, '.local/bench/db-cost-child.mjs');
const childOptions = relayChildBuild(ROOT);
await build({ ...childOptions, outfile: childBundle });

interface ChildResult {
  published: number;
  seconds: number;
  calls: number;
  cpu_user_ms: number;
  cpu_system_ms: number;
}

async function relayChild(
  env: Record<string, string>,
  options: { nodeArgs?: string[]; bundle?: string; node?: string } = {},
): Promise<ChildResult> {
  const { stdout } = await run(
    options.node ?? process.execPath,
    [...(options.nodeArgs ?? []), options.bundle ?? childBundle],
    {
      env: { ...process.env, DATABASE_URL: url, RELAY: JSON.stringify(RELAY), ...env },
      maxBuffer: 16 * 2 ** 20,
    },
  );
  return JSON.parse(stdout.trim().split('\n').pop() as string);
}

// --- 2. database time per 1,000 events ----------------------------------------
interface StatementCost {
  kind: string;
  calls: number;
  ms: number;
  rows: number;
  wal_bytes: number;
  query: string;
}

/** What pg_stat_statements recorded in this database since the last reset, our own queries aside. */
async function statementCosts(): Promise<StatementCost[]> {
  const { rows } = await pool.query(
    `SELECT query, calls::int, total_exec_time + total_plan_time AS ms, rows::bigint, wal_bytes::bigint
     FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND query NOT ILIKE '%pg_stat_statements%'
     ORDER BY ms DESC`,
  );
  return rows.map((r) => ({
    kind: /SKIP LOCKED/i.test(r.query)
      ? 'claim'
      : /^\s*(UPDATE\s+outbox_events|DELETE\s+FROM\s+outbox_events|WITH\s+o\s+AS)/i.test(r.query)
        ? 'outcome'
        : 'other',
    calls: r.calls,
    ms: Number(r.ms),
    rows: Number(r.rows),
    wal_bytes: Number(r.wal_bytes),
    query: r.query.replace(/\s+/g, ' ').slice(0, 80),
  }));
}

function perThousand(costs: StatementCost[], events: number) {
  const sum = (kind?: string) =>
    costs.filter((c) => kind === undefined || c.kind === kind).reduce((a, c) => a + c.ms, 0);
  const wal = costs.reduce((a, c) => a + c.wal_bytes, 0);
  const statements = costs.reduce((a, c) => a + c.calls, 0);
  return {
    total: (sum() / events) * 1000,
    claim: (sum('claim') / events) * 1000,
    outcome: (sum('outcome') / events) * 1000,
    other: (sum('other') / events) * 1000,
    statements: (statements / events) * 1000,
    wal_kb: (wal / 1024 / events) * 1000,
  };
}

/**
 * CPU time of the whole server so far, in ms: the postmaster and every
 * process it runs (backends, autovacuum, WAL writer, checkpointer), exited
 * children included (the postmaster reaps them: cutime, cstime). Linux /proc.
 */
function serverCpuMs(): number {
  const tick = 1000 / 100; // USER_HZ is 100 on Linux
  const fields = (pid: number) => {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
  };
  // After the state field: ppid is [1], utime [11], stime [12], cutime [13], cstime [14].
  const postmaster = fields(server.pid);
  let ticks = (postmaster[11] ?? 0) + (postmaster[12] ?? 0) + (postmaster[13] ?? 0) + (postmaster[14] ?? 0);
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const f = fields(Number(entry));
      if (f[1] === server.pid) ticks += (f[11] ?? 0) + (f[12] ?? 0);
    } catch {
      // ended while we looked: the postmaster has (or will have) its time
    }
  }
  return ticks * tick;
}

/** Row updates of outbox_events so far, and how many were HOT (no index entries written). */
async function updates(): Promise<{ all: number; hot: number }> {
  await pool.query('SELECT pg_stat_clear_snapshot()');
  const { rows } = await pool.query(
    `SELECT n_tup_upd AS all, n_tup_hot_upd AS hot FROM pg_stat_user_tables WHERE relname = 'outbox_events'`,
  );
  return { all: Number(rows[0].all), hot: Number(rows[0].hot) };
}

/** Lets the child's sessions end and be reaped, so their CPU lands in the postmaster's. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 500));

async function dbCost() {
  log(`db_ms_per_1000: relay, ${BACKLOG} events, null publisher`);
  await freshBacklog(BACKLOG);
  await pool.query('SELECT pg_stat_statements_reset()');
  await settle();
  const relayCpuBefore = serverCpuMs();
  const relay = await relayChild({ PUBLISHER: 'null' });
  await settle();
  const relayServerCpu = serverCpuMs() - relayCpuBefore;
  if (relay.published !== BACKLOG) throw new Error(`relay published ${relay.published} of ${BACKLOG}`);
  const relayCosts = await statementCosts();
  const relayPer = perThousand(relayCosts, relay.published);
  log(
    `  4 workers (batch 500): ${relayPer.total.toFixed(1)} ms per 1,000 (claim ${relayPer.claim.toFixed(1)}, ` +
      `outcome ${relayPer.outcome.toFixed(1)}), server CPU ${((relayServerCpu / relay.published) * 1000).toFixed(1)}`,
  );

  // What keeping published rows costs later: cleanup deleting them (its
  // DELETEs walk the processed_at index FOR UPDATE SKIP LOCKED; every
  // statement of the run counts). VACUUM afterwards is autovacuum's.
  log('db_ms_per_1000: cleanup deleting those published rows (retention 0)');
  await pool.query('SELECT pg_stat_statements_reset()');
  const cleanup = await runCleanup(
    { db: pool, options: { outboxRetentionDays: 0, safetyMarginMs: 0 } },
    { remainingMs: () => 600_000 },
  );
  if (cleanup.outboxEvents.deleted !== BACKLOG) {
    throw new Error(`cleanup deleted ${cleanup.outboxEvents.deleted} of ${BACKLOG}`);
  }
  const cleanupPer = perThousand(await statementCosts(), BACKLOG);
  log(`  ${cleanupPer.total.toFixed(1)} ms per 1,000 rows deleted`);

  /** The same drain in another shape: one worker (statements never wait for each other), a fillfactor. */
  async function relayVariant(label: string, relayOptions: object, fillfactor?: number) {
    log(`db_ms_per_1000: relay, ${label}`);
    // The table's own storage options (the migrations set fillfactor 50), put back afterwards.
    const { rows: before } = await pool.query(
      `SELECT coalesce(reloptions, '{}') AS options FROM pg_class WHERE oid = 'outbox_events'::regclass`,
    );
    if (fillfactor) await pool.query(`ALTER TABLE outbox_events SET (fillfactor = ${fillfactor})`);
    await freshBacklog(BACKLOG);
    await pool.query('SELECT pg_stat_statements_reset()');
    const updatesBefore = await updates();
    await settle();
    const cpuBefore = serverCpuMs();
    const r = await relayChild({ PUBLISHER: 'null', RELAY: JSON.stringify({ ...RELAY, ...relayOptions }) });
    await settle();
    const cpu = serverCpuMs() - cpuBefore;
    const costs = await statementCosts();
    if (fillfactor) {
      const own = (before[0].options as string[]).find((o) => o.startsWith('fillfactor='));
      await pool.query(
        own ? `ALTER TABLE outbox_events SET (${own})` : 'ALTER TABLE outbox_events RESET (fillfactor)',
      );
    }
    const per = perThousand(costs, r.published);
    const updatesAfter = await updates();
    const hotShare = (updatesAfter.hot - updatesBefore.hot) / (updatesAfter.all - updatesBefore.all);
    log(
      `  ${label}: ${per.total.toFixed(1)} ms per 1,000 (claim ${per.claim.toFixed(1)}, outcome ${per.outcome.toFixed(1)}), ` +
        `server CPU ${((cpu / r.published) * 1000).toFixed(1)}, HOT updates ${(hotShare * 100).toFixed(0)}%`,
    );
    return {
      hot_update_share: round(hotShare, 2),
      total: round(per.total),
      claim: round(per.claim),
      outcome: round(per.outcome),
      server_cpu: round((cpu / r.published) * 1000),
      eps: Math.round(r.published / r.seconds),
    };
  }
  const oneWorker = await relayVariant('1 worker (batch 500)', { workers: 1 });
  const fillfactor50 = await relayVariant('fillfactor 50 (4 workers, batch 500)', {}, 50);
  const deletePublished = await relayVariant('published rows deleted (4 workers, batch 500)', {
    publishedRows: 'delete',
  });
  const deletePublishedOneWorker = await relayVariant('published rows deleted, 1 worker (batch 500)', {
    publishedRows: 'delete',
    workers: 1,
  });

  log(`db_ms_per_1000: baseline (bench/baseline.ts), ${BACKLOG} events, null publisher`);
  await freshBacklog(BACKLOG);
  await pool.query('SELECT pg_stat_statements_reset()');
  await settle();
  const baselineCpuBefore = serverCpuMs();
  const started = performance.now();
  let done = 0;
  for (;;) {
    const n = await baselineBatch(pool, async () => {}, 100);
    if (n === 0) break;
    done += n;
  }
  const baselineSeconds = (performance.now() - started) / 1000;
  await settle();
  const baselineServerCpu = serverCpuMs() - baselineCpuBefore;
  const baselineCosts = await statementCosts();
  const basePer = perThousand(baselineCosts, done);
  for (const [name, costs] of [
    ['relay', relayCosts],
    ['baseline', baselineCosts],
  ] as const) {
    for (const c of costs.slice(0, 6)) {
      log(`  ${name} ${c.kind}: ${c.calls} calls, ${c.ms.toFixed(0)} ms, ${c.rows} rows: ${c.query}`);
    }
  }
  return {
    relay: round(relayPer.total),
    baseline: round(basePer.total),
    ratio: round(relayPer.total / basePer.total, 3),
    relay_claim: round(relayPer.claim),
    relay_outcome: round(relayPer.outcome),
    baseline_claim: round(basePer.claim),
    baseline_outcome: round(basePer.outcome),
    baseline_other: round(basePer.other, 2),
    relay_statements: round(relayPer.statements),
    baseline_statements: round(basePer.statements),
    relay_wal_kb: round(relayPer.wal_kb),
    baseline_wal_kb: round(basePer.wal_kb),
    relay_eps: Math.round(relay.published / relay.seconds),
    baseline_eps: Math.round(done / baselineSeconds),
    // Everything the server's processes spent, as the OS counts it: also
    // protocol handling, parsing, commits, WAL writing and autovacuum, which
    // pg_stat_statements does not see.
    relay_server_cpu: round((relayServerCpu / relay.published) * 1000),
    relay_one_worker: oneWorker,
    relay_fillfactor_50: fillfactor50,
    // OUTBOX_PUBLISHED_ROWS=delete: the outcome deletes published rows, and
    // cleanup has none to delete. Compare with relay + cleanup.
    relay_delete_published: deletePublished,
    relay_delete_published_one_worker: deletePublishedOneWorker,
    cleanup: round(cleanupPer.total),
    relay_with_cleanup: round(relayPer.total + cleanupPer.total),
    delete_published_ratio_to_relay_with_cleanup: round(
      deletePublished.total / (relayPer.total + cleanupPer.total),
      2,
    ),
    baseline_server_cpu: round((baselineServerCpu / done) * 1000),
    server_cpu_ratio: round(relayServerCpu / relay.published / (baselineServerCpu / done), 3),
  };
}

// --- 3. relay CPU per 1,000 events published ---------------------------------
/**
 * A .cpuprofile summarized: self time by function, by package, and by
 * "caller": time in Node's own code (HTTP, sockets, crypto, streams) is
 * charged to the nearest package on the stack that called it, so the SDK's
 * HTTP and signing work counts as the SDK's. Idle time is left out.
 */
function summarizeProfile(file: string, top = 25) {
  const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as {
    nodes: Array<{
      id: number;
      callFrame: { functionName: string; url: string; lineNumber: number };
      children?: number[];
    }>;
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => {
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  const areaOf = (id: number): string | undefined => {
    const frame = byId.get(id)?.callFrame;
    if (!frame) return undefined;
    const where = frame.url.replace(/^file:\/\//, '').replace(ROOT, '');
    if (where.startsWith('node_modules/')) return where.match(/^node_modules\/((?:@[^/]+\/)?[^/]+)/)?.[1];
    if (where.startsWith('.local/bench/')) return 'our code (lib/, bench/)';
    return undefined; // Node's own code, native code, V8
  };
  const group = (area: string) =>
    area.startsWith('@smithy/') || area.startsWith('@aws-sdk/')
      ? 'AWS SDK (with the HTTP, socket and crypto work it calls)'
      : area.startsWith('pg') || area.startsWith('postgres-')
        ? 'pg driver'
        : area;
  const byFunction = new Map<string, number>();
  const byArea = new Map<string, number>();
  const byCaller = new Map<string, number>();
  let total = 0;
  const add = (m: Map<string, number>, k: string, us: number) => m.set(k, (m.get(k) ?? 0) + us);
  for (const [id, us] of self) {
    const frame = byId.get(id)?.callFrame;
    if (!frame || frame.functionName === '(idle)') continue;
    total += us;
    const where = frame.url.replace(/^file:\/\//, '').replace(ROOT, '');
    add(byFunction, `${frame.functionName || '(anonymous)'} ${where}:${frame.lineNumber + 1}`, us);
    const special = ['(garbage collector)', '(program)'].includes(frame.functionName)
      ? frame.functionName
      : undefined;
    add(byArea, special ?? areaOf(id) ?? 'node internals', us);
    let caller: string | undefined = special ?? areaOf(id);
    for (let p = parent.get(id); caller === undefined && p !== undefined; p = parent.get(p))
      caller = areaOf(p);
    add(byCaller, group(caller ?? 'node event loop (socket reads, timers, promise jobs)'), us);
  }
  const line = ([k, us]: [string, number]) =>
    `${`${((us / total) * 100).toFixed(1)}%`.padStart(6)} ${(us / 1000).toFixed(0).padStart(6)} ms  ${k}`;
  const sorted = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]);
  return {
    total_ms: Math.round(total / 1000),
    /** Percent of the profile's CPU (idle left out) by who asked for it. */
    shares: Object.fromEntries(sorted(byCaller).map(([k, us]) => [k, round((us / total) * 100)])),
    by_caller: sorted(byCaller).map(line),
    areas: sorted(byArea).slice(0, 15).map(line),
    functions: sorted(byFunction).slice(0, top).map(line),
  };
}

async function cpuCost() {
  const aws = await startLocalAws({ emulator: 'ministack', log });
  useLocalAwsEnv(aws.endpoint);
  try {
    const sqs = new SQSClient({});
    const eventBridge = new EventBridgeClient({});
    const { QueueUrl } = await sqs.send(
      new CreateQueueCommand({ QueueName: `db-cost-${randomUUID().slice(0, 8)}` }),
    );
    const busName = `db-cost-${randomUUID().slice(0, 8)}`;
    await eventBridge.send(new CreateEventBusCommand({ Name: busName }));
    const env = { QUEUE_URL: QueueUrl as string, BUS_NAME: busName };

    async function cpuDrain(
      publisher: 'null' | 'sqs' | 'eventbridge' | 'both',
      extra: Record<string, string> = {},
      node?: string,
    ) {
      await freshBacklog(CPU_BACKLOG);
      const r = await relayChild({ ...env, PUBLISHER: publisher, ...extra }, node ? { node } : {});
      if (r.published !== CPU_BACKLOG)
        throw new Error(`${publisher}: published ${r.published} of ${CPU_BACKLOG}`);
      const ms = ((r.cpu_user_ms + r.cpu_system_ms) / r.published) * 1000;
      log(
        `  ${publisher}${extra.SDK_MD5 ? ' (md5: false)' : ''}${extra.DIRECT_CALLS ? ' (direct calls)' : ''}${node ? ' (Node 22)' : ''}: ${ms.toFixed(1)} ms CPU per 1,000 ` +
          `(user ${((r.cpu_user_ms / r.published) * 1000).toFixed(1)}, system ${((r.cpu_system_ms / r.published) * 1000).toFixed(1)}), ` +
          `${Math.round(r.published / r.seconds)} events/s`,
      );
      return { ms, result: r };
    }

    log(
      `cpu_ms_per_1000: ${CPU_BACKLOG} events per drain, MiniStack (${aws.source}), ${CPU_REPEAT} rounds, medians`,
    );
    const runs = {
      null: [] as number[],
      sqs: [] as number[],
      sqs_md5_off: [] as number[],
      eventbridge: [] as number[],
      sqs_node22: [] as number[],
      eventbridge_node22: [] as number[],
      sqs_direct: [] as number[],
      eventbridge_direct: [] as number[],
      sqs_direct_node22: [] as number[],
      eventbridge_direct_node22: [] as number[],
      both_direct_node22: [] as number[],
    };
    // The Lambda runtime's major (nodejs22.x), beside the host's Node.
    const node22 = ensureNode22(log);
    const eps = { sqs: [] as number[], eventbridge: [] as number[] };
    const rate = (r: ChildResult) => r.published / r.seconds;
    const calibration = calibrationMs();
    for (let i = 0; i < CPU_REPEAT; i++) {
      runs.null.push((await cpuDrain('null')).ms);
      const s = await cpuDrain('sqs');
      runs.sqs.push(s.ms);
      eps.sqs.push(rate(s.result));
      runs.sqs_md5_off.push((await cpuDrain('sqs', { SDK_MD5: 'off' })).ms);
      const e = await cpuDrain('eventbridge');
      runs.eventbridge.push(e.ms);
      eps.eventbridge.push(rate(e.result));
      runs.sqs_node22.push((await cpuDrain('sqs', {}, node22)).ms);
      runs.eventbridge_node22.push((await cpuDrain('eventbridge', {}, node22)).ms);
      // Direct calls (the deployed relay's OUTBOX_DIRECT_CALLS).
      runs.sqs_direct.push((await cpuDrain('sqs', { DIRECT_CALLS: '1' })).ms);
      runs.eventbridge_direct.push((await cpuDrain('eventbridge', { DIRECT_CALLS: '1' })).ms);
      runs.sqs_direct_node22.push((await cpuDrain('sqs', { DIRECT_CALLS: '1' }, node22)).ms);
      runs.eventbridge_direct_node22.push((await cpuDrain('eventbridge', { DIRECT_CALLS: '1' }, node22)).ms);
      // As deployed: each event to the queue and the bus, the relay's settings of serverless.yml.
      runs.both_direct_node22.push(
        (
          await cpuDrain(
            'both',
            {
              DIRECT_CALLS: '1',
              RELAY: JSON.stringify(DEPLOYED_RELAY.relay),
              CONCURRENCY: String(DEPLOYED_RELAY.concurrency),
            },
            node22,
          )
        ).ms,
      );
    }

    let profiles: Record<string, ReturnType<typeof summarizeProfile>> | undefined;
    if (PROFILE) {
      // Our code bundled, packages loaded from node_modules: the profile then
      // says which package each function belongs to.
      const dir = path.join(ROOT, '.local/bench/profiles');
      fs.rmSync(dir, { recursive: true, force: true });
      fs.mkdirSync(dir, { recursive: true });
      const profiled = path.join(ROOT, '.local/bench/db-cost-child-external.mjs');
      await build({ ...childOptions, outfile: profiled, packages: 'external' });
      profiles = {};
      for (const name of ['sqs', 'eventbridge', 'sqs_direct', 'eventbridge_direct'] as const) {
        const publisher = name.startsWith('sqs') ? 'sqs' : 'eventbridge';
        await freshBacklog(CPU_BACKLOG);
        await relayChild(
          { ...env, PUBLISHER: publisher, ...(name.endsWith('_direct') ? { DIRECT_CALLS: '1' } : {}) },
          {
            bundle: profiled,
            nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${dir}`, `--cpu-prof-name=${name}.cpuprofile`],
          },
        );
        const summary = summarizeProfile(path.join(dir, `${name}.cpuprofile`));
        profiles[name] = summary;
        log(`\nprofile (${name}): CPU by who asked for it, of ${summary.total_ms} ms`);
        for (const line of summary.by_caller) log(`  ${line}`);
        log(`profile (${name}): self time by package`);
        for (const line of summary.areas) log(`  ${line}`);
        log(`profile (${name}): top functions by self time`);
        for (const line of summary.functions) log(`  ${line}`);
      }
    }
    return {
      emulator: aws.source,
      result: {
        sqs: round(median(runs.sqs)),
        eventbridge: round(median(runs.eventbridge)),
        null_publisher: round(median(runs.null)),
        sqs_md5_off: round(median(runs.sqs_md5_off)),
        sqs_node22: round(median(runs.sqs_node22)),
        eventbridge_node22: round(median(runs.eventbridge_node22)),
        sqs_direct: round(median(runs.sqs_direct)),
        eventbridge_direct: round(median(runs.eventbridge_direct)),
        sqs_direct_node22: round(median(runs.sqs_direct_node22)),
        eventbridge_direct_node22: round(median(runs.eventbridge_direct_node22)),
        both_direct_node22: round(median(runs.both_direct_node22)),
        // This machine's speed in this run (bench/calibrate.ts).
        calibration_ms: calibration,
        node: process.version,
        sqs_eps: Math.round(median(eps.sqs)),
        eventbridge_eps: Math.round(median(eps.eventbridge)),
        runs: Object.fromEntries(Object.entries(runs).map(([k, v]) => [k, v.map((x) => round(x))])),
        backlog: CPU_BACKLOG,
        ...(profiles
          ? {
              profile_percent: Object.fromEntries(
                Object.entries(profiles).map(([publisher, p]) => [publisher, p.shares]),
              ),
            }
          : {}),
      },
    };
  } finally {
    await aws.stop();
  }
}

// --- 4. a held snapshot ---------------------------------------------------------
async function sizes() {
  const { rows } = await pool.query(
    `SELECT pg_relation_size('outbox_events') AS heap, pg_indexes_size('outbox_events') AS indexes,
            pg_total_relation_size('outbox_events') AS total`,
  );
  return { heap: Number(rows[0].heap), indexes: Number(rows[0].indexes) };
}

/** What the claims of the last drain cost, from pg_stat_statements. */
async function claimStats() {
  const { rows } = await pool.query(
    `SELECT sum(calls)::int AS calls, sum(total_exec_time) AS ms, sum(shared_blks_hit + shared_blks_read) AS blocks
     FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query ILIKE '%SKIP LOCKED%'`,
  );
  const calls = Number(rows[0].calls);
  return {
    claim_ms_mean: round(Number(rows[0].ms) / calls, 2),
    claim_blocks_mean: Math.round(rows[0].blocks / calls),
  };
}

async function deadRows(): Promise<number> {
  await pool.query('SELECT pg_stat_clear_snapshot()');
  const { rows } = await pool.query(
    `SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox_events'`,
  );
  return Number(rows[0].n_dead_tup);
}

/**
 * Two rounds of: write a backlog, drain it, VACUUM. With `hold`, a session
 * takes its snapshot (REPEATABLE READ, SELECT 1) after the table is emptied
 * and before the first backlog is written, and keeps it through both rounds.
 */
async function heldDrain(hold: boolean, relayOptions: object = {}) {
  await pool.query('TRUNCATE outbox_events');
  await pool.query('VACUUM ANALYZE outbox_events');
  const holder = new pg.Client({ connectionString: url });
  await holder.connect();
  if (hold) {
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT 1');
  }
  const mb = (bytes: number) => round(bytes / 2 ** 20, 2);
  try {
    const rounds = [];
    for (let n = 1; n <= 2; n++) {
      await fillBacklog(BACKLOG);
      await pool.query('ANALYZE outbox_events');
      const before = await sizes();
      await pool.query('SELECT pg_stat_statements_reset()');
      const r = await relayChild({
        PUBLISHER: 'null',
        TIME_BOX_MS: String(HELD_TIME_BOX_S * 1000),
        RELAY: JSON.stringify({ ...RELAY, ...relayOptions }),
      });
      const after = await sizes();
      const claims = await claimStats();
      await pool.query('VACUUM outbox_events');
      const vacuumed = await sizes();
      rounds.push({
        eps: Math.round(r.published / r.seconds),
        published: r.published,
        seconds: round(r.seconds, 2),
        ...claims,
        heap_mb_before: mb(before.heap),
        heap_mb_after: mb(after.heap),
        indexes_mb_before: mb(before.indexes),
        indexes_mb_after: mb(after.indexes),
        dead_rows_after_vacuum: await deadRows(),
        heap_mb_after_vacuum: mb(vacuumed.heap),
        indexes_mb_after_vacuum: mb(vacuumed.indexes),
      });
      log(`  ${hold ? 'held snapshot' : 'no held snapshot'}, round ${n}: ${JSON.stringify(rounds.at(-1))}`);
    }
    const [first, second] = rounds as [(typeof rounds)[0], (typeof rounds)[0]];
    return {
      eps: first.eps,
      heap_growth: round(first.heap_mb_after / first.heap_mb_before, 2),
      indexes_growth: round(first.indexes_mb_after / first.indexes_mb_before, 2),
      // After a second backlog of the same size, drained and vacuumed: space
      // freed by vacuum is reused, unless the snapshot keeps the old rows.
      heap_growth_two_rounds: round(second.heap_mb_after_vacuum / first.heap_mb_before, 2),
      indexes_growth_two_rounds: round(second.indexes_mb_after_vacuum / first.indexes_mb_before, 2),
      rounds,
    };
  } finally {
    if (hold) await holder.query('COMMIT');
    await holder.end();
  }
}

type HeldDrain = Awaited<ReturnType<typeof heldDrain>>;

async function heldXmin() {
  log(
    `held_xmin: ${BACKLOG} events, null publisher, without and with a held snapshot, ${HELD_REPEAT} times each, alternating`,
  );
  const pairs: Array<{ free: HeldDrain; held: HeldDrain }> = [];
  for (let i = 0; i < HELD_REPEAT; i++)
    pairs.push({ free: await heldDrain(false), held: await heldDrain(true) });
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const eps = (side: 'free' | 'held', n: 0 | 1) => pairs.map((p) => p[side].rounds[n]?.eps ?? 0);
  const [first] = pairs as [{ free: HeldDrain; held: HeldDrain }];
  // What a user can turn: each claim steps over the dead entries once for its
  // whole batch, so bigger batches spread that walk over more events.
  log('held_xmin: the held snapshot again, batches of 2,000');
  const bigBatches = await heldDrain(true, { batchSize: 2000 });
  return {
    // First backlog after the snapshot was taken, mean of the repetitions.
    ratio: round(mean(eps('held', 0)) / mean(eps('free', 0)), 3),
    // The next backlog, the snapshot still held.
    ratio_second_round: round(mean(eps('held', 1)) / mean(eps('free', 1)), 3),
    eps: {
      without: eps('free', 0),
      with: eps('held', 0),
      without_second: eps('free', 1),
      with_second: eps('held', 1),
    },
    with_batch_2000: {
      eps: bigBatches.rounds.map((r) => r.eps),
      ratio: round((bigBatches.rounds[0]?.eps ?? 0) / mean(eps('free', 0)), 3),
      ratio_second_round: round((bigBatches.rounds[1]?.eps ?? 0) / mean(eps('free', 1)), 3),
      claim_blocks_mean: bigBatches.rounds.map((r) => r.claim_blocks_mean),
    },
    without: first.free,
    with: first.held,
  };
}

// --- run, then merge into bench/results.json -----------------------------------
const started = new Date().toISOString();
const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' });
const commit = git('rev-parse', '--short', 'HEAD').trim();
// Other work in progress in the checkout is in what the child bundles.
const uncommitted = git('status', '--porcelain', '--', 'lib', 'functions')
  .split('\n')
  .filter(Boolean)
  .map((l) => l.slice(3));
const loadBefore = os.loadavg();
const db = SKIP.has('db') ? undefined : await dbCost();
const held = SKIP.has('held') ? undefined : await heldXmin();
const cpu = SKIP.has('cpu') ? undefined : await cpuCost();
const loadAfter = os.loadavg();
await pool.end();
await server.stop();

const previous = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
const results = {
  ...previous,
  db_cost_run: {
    date: started,
    // Keys of parts skipped in this run are those of an earlier run.
    parts_measured: ['db', 'held', 'cpu'].filter((part) => !SKIP.has(part)),
    commit,
    uncommitted_lib_changes_in_checkout: uncommitted,
    cpus: os.cpus().length,
    cpu_model: os.cpus()[0]?.model,
    memory_gb: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    postgres: serverVersion,
    postgres_server: `bench/db-cost.ts's own (initdb; ${Object.entries(SERVER_SETTINGS)
      .filter(([k]) => !['listen_addresses', 'unix_socket_directories'].includes(k))
      .map(([k, v]) => `${k}=${v}`)
      .join(', ')}; other settings PostgreSQL's defaults, autovacuum on)`,
    emulator: cpu?.emulator ?? previous.db_cost_run?.emulator,
    load_average_1m: [round(loadBefore[0] ?? 0, 2), round(loadAfter[0] ?? 0, 2)],
    note: 'shared 2-core machine: other engineers were running tests and benchmarks at the same time',
    backlog: BACKLOG,
    relay: RELAY,
    db_time:
      'db_ms_per_1000 relay/baseline/claim/outcome: pg_stat_statements total_exec_time + total_plan_time of every ' +
      'statement (time inside planner and executor, waits for CPU and locks included); *_server_cpu: user + system ' +
      "CPU of all the server's processes (backends with protocol handling and commits, autovacuum, WAL writer, " +
      'checkpointer), from /proc; all per 1,000 events',
  },
  ...(db ? { db_ms_per_1000: db } : {}),
  ...(cpu ? { cpu_ms_per_1000: cpu.result } : {}),
  ...(held ? { held_xmin: held } : {}),
};
fs.writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);

const rows: Array<[string, number | undefined, string]> = [
  ['db_ms_per_1000.relay', results.db_ms_per_1000?.relay, '<= 20'],
  ['db_ms_per_1000.baseline', results.db_ms_per_1000?.baseline, ''],
  ['db_ms_per_1000.ratio', results.db_ms_per_1000?.ratio, '<= 0.1'],
  [
    'db_ms_per_1000.relay_delete_published.total',
    results.db_ms_per_1000?.relay_delete_published?.total,
    '<= 20',
  ],
  ['db_ms_per_1000.relay_with_cleanup', results.db_ms_per_1000?.relay_with_cleanup, ''],
  ['cpu_ms_per_1000.sqs', results.cpu_ms_per_1000?.sqs, '<= 30'],
  ['cpu_ms_per_1000.eventbridge', results.cpu_ms_per_1000?.eventbridge, '<= 30'],
  ['cpu_ms_per_1000.null_publisher', results.cpu_ms_per_1000?.null_publisher, ''],
  ['held_xmin.ratio', results.held_xmin?.ratio, '>= 0.8'],
];
console.log('\n| metric | value | target | met |\n|---|---:|---|---|');
for (const [name, value, target] of rows) {
  if (value === undefined) continue;
  const [op, limit] = target.split(' ');
  const met =
    target === '' ? '' : (op === '<=' ? value <= Number(limit) : value >= Number(limit)) ? 'yes' : 'NO';
  console.log(`| ${name} | ${value} | ${target} | ${met} |`);
}
log('\nmerged db_ms_per_1000, cpu_ms_per_1000, held_xmin, db_cost_run into bench/results.json');
