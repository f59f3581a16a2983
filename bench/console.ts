/**
 * `npm run bench:console`: the ops console on a big outbox, against the local
 * PostgreSQL (a database of its own, `outbox_bench_console`, dropped at the
 * end unless BENCH_KEEP=1).
 *
 * The outbox: BENCH_CONSOLE_EVENTS (1,000,000) events, loaded set-based
 * (INSERT … SELECT generate_series): 10,000 dead letters of four causes
 * over the last six hours, 5,000 pending (1,000 of them waiting for an
 * unavailable target), the rest published at an even pace over the last
 * day; 100,000 aggregates. Then VACUUM ANALYZE, as autovacuum would leave it.
 *
 * Measured through the real server (startConsole: node:http, the token
 * guard, the handler, a pool of 4):
 * - first_page_ms: headless Chromium (Debian's, through playwright-core)
 *   opens the console's URL in a fresh browser context and waits until the
 *   overview is drawn (page, scripts, uPlot, the session, overview and
 *   last-day calls, both charts): the median of BENCH_PAGES (5) loads; the
 *   first (cold) load is reported beside it. Target 1,000 ms.
 * - api_ms_p99: each GET route called BENCH_CALLS (100) times in a row with
 *   the bearer token; each route's p50/p99, and the worst p99. Target 200 ms.
 * - the redrive dry run of the largest group (POST, CSRF token): reported
 *   beside, as it is the redrive operation's own statements.
 *
 * Merges `console` into bench/results.json, keeping every other key.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import pg from 'pg';
import { startConsole } from '../lib/console/index.js';
import { migrate } from '../lib/db/migrate.js';
import { dropDatabase, ensureDatabase, startLocalPostgres } from '../scripts/local/postgres.js';
import { launchChromium } from '../test/support/browser.js';

const EVENTS = Number(process.env.BENCH_CONSOLE_EVENTS ?? 1_000_000);
const DEAD = 10_000;
const PENDING = 5_000;
const CALLS = Number(process.env.BENCH_CALLS ?? 100);
const PAGES = Number(process.env.BENCH_PAGES ?? 5);
const DB = 'outbox_bench_console';
const RESULTS = new URL('./results.json', import.meta.url);
const TARGETS = { first_page_ms: 1_000, api_ms_p99: 200 };
const log = (line: string) => process.stderr.write(`${line}\n`);
const quantile = (values: number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return +(sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] as number).toFixed(1);
};

const postgres = await startLocalPostgres({ log });
await dropDatabase(postgres.adminUrl, DB);
const url = await ensureDatabase(postgres.adminUrl, DB);
await migrate({ databaseUrl: url });
const pool = new pg.Pool({ connectionString: url, max: 4 });

log(`loading ${EVENTS.toLocaleString('en-US')} events…`);
let started = performance.now();
const published = EVENTS - DEAD - PENDING;
await pool.query(
  `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, processed_at,
                              dead_lettered_at, last_error, attempts, retry_after, waiting_for)
   SELECT gen_random_uuid(), 'order', 'order-' || (g % 100000),
          (ARRAY['order.created', 'order.paid', 'order.shipped', 'payment.captured'])[g % 4 + 1],
          jsonb_build_object('order', g, 'amount', g % 997), t, CASE WHEN g <= $1 THEN t + interval '40 ms' END,
          CASE WHEN g > $1 + $2 THEN now() - (g - $1 - $2) * interval '2 seconds' END,
          CASE WHEN g > $1 + $2 THEN (ARRAY[
            'attempt limit (5) reached; last error: SQS config error: QueueDoesNotExist: The specified queue does not exist',
            'no route for event type "order.shipped"',
            'sqs:https://sqs.eu-west-1.amazonaws.com/123456789012/orders: message is 1100000 bytes, over the limit of 1048576 bytes',
            'attempt limit (5) reached; last error: eventbridge:orders-bus: ValidationException: Detail is malformed'])[g % 4 + 1] END,
          CASE WHEN g > $1 + $2 THEN 5 ELSE 0 END,
          CASE WHEN g > $1 AND g <= $1 + 1000 THEN now() + interval '30 seconds' END,
          CASE WHEN g > $1 AND g <= $1 + 1000 THEN '{sqs:https://sqs.eu-west-1.amazonaws.com/123456789012/billing}'::text[] END
   FROM generate_series(1, $3::int) g,
        LATERAL (SELECT CASE WHEN g <= $1 THEN now() - interval '1 day' * (1 - g::float8 / $1) - interval '1 second'
                             ELSE now() - interval '6 hours' * random() END AS t) x`,
  [published, PENDING, EVENTS],
);
await pool.query('VACUUM ANALYZE outbox_events');
const loadSeconds = +((performance.now() - started) / 1000).toFixed(1);
log(`loaded in ${loadSeconds} s`);

const server = await startConsole({ databaseUrl: url, allowActions: true, actor: 'bench' });
const base = `http://127.0.0.1:${server.port}`;
const auth = { authorization: `Bearer ${server.token}` };
const getJson = async (path: string) => {
  const response = await fetch(`${base}${path}`, { headers: auth });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return response.json();
};

// --- first page, in a browser ------------------------------------------------------
const browser = await launchChromium();
const pageLoads: number[] = [];
for (let i = 0; i < PAGES; i++) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  started = performance.now();
  await page.goto(server.url);
  await page.waitForSelector('main[data-ready="overview"]', { timeout: 30_000 });
  pageLoads.push(performance.now() - started);
  await context.close();
}
await browser.close();
const firstPage = quantile(pageLoads, 0.5);
log(`first page: median ${firstPage} ms (cold ${pageLoads[0]?.toFixed(0)} ms)`);

// --- each API route ------------------------------------------------------------------
const { groups } = (await getJson('/api/dead-letters/groups')) as {
  groups: Array<{ id: string; count: number }>;
};
const { rows } = await pool.query('SELECT id FROM outbox_events WHERE dead_lettered_at IS NOT NULL LIMIT 1');
const routes: Record<string, string> = {
  session: '/api/session',
  overview: '/api/overview',
  throughput_day: '/api/throughput?window=day',
  dead_letter_groups: '/api/dead-letters/groups',
  dead_letters: '/api/dead-letters?limit=50',
  group_rows: `/api/dead-letters?group=${groups[0]?.id}&limit=50`,
  event: `/api/events/${rows[0].id}`,
  timeline: '/api/aggregates/order/order-4242/timeline',
};
const perRoute: Record<string, { p50: number; p99: number }> = {};
for (const [name, path] of Object.entries(routes)) {
  const times: number[] = [];
  for (let i = 0; i < CALLS; i++) {
    started = performance.now();
    await getJson(path);
    times.push(performance.now() - started);
  }
  perRoute[name] = { p50: quantile(times, 0.5), p99: quantile(times, 0.99) };
  log(`${name}: p50 ${perRoute[name].p50} ms, p99 ${perRoute[name].p99} ms`);
}
const apiP99 = Math.max(...Object.values(perRoute).map((r) => r.p99));

// --- the redrive dry run of the largest group (the operation's statements) ---------------
const { csrfToken } = (await getJson('/api/session')) as { csrfToken: string };
const dryRuns: number[] = [];
for (let i = 0; i < 20; i++) {
  started = performance.now();
  const response = await fetch(`${base}/api/actions/redrive`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json', 'x-csrf-token': csrfToken },
    body: JSON.stringify({ group: groups[0]?.id, dryRun: true }),
  });
  if (!response.ok) throw new Error(`redrive dry run: ${response.status}`);
  await response.json();
  dryRuns.push(performance.now() - started);
}
const dryRun = { rows: groups[0]?.count, p50: quantile(dryRuns, 0.5), p99: quantile(dryRuns, 0.99) };
log(`redrive dry run of ${dryRun.rows} rows: p50 ${dryRun.p50} ms, p99 ${dryRun.p99} ms`);

await server.close();
await pool.end();
if (process.env.BENCH_KEEP !== '1') await dropDatabase(postgres.adminUrl, DB);
await postgres.stop();

const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
const result = {
  first_page_ms: firstPage,
  first_page_cold_ms: +(pageLoads[0] as number).toFixed(1),
  api_ms_p99: apiP99,
  per_route_ms: perRoute,
  redrive_dry_run_ms: dryRun,
  targets: TARGETS,
  met: { first_page_ms: firstPage <= TARGETS.first_page_ms, api_ms_p99: apiP99 <= TARGETS.api_ms_p99 },
  outbox: {
    events: EVENTS,
    dead_letters: DEAD,
    pending: PENDING,
    aggregates: 100_000,
    load_seconds: loadSeconds,
  },
  method: `first page: headless Chromium, fresh context, console URL until the overview is drawn, median of ${PAGES}; API: ${CALLS} sequential calls per route through startConsole (bearer token), p50/p99; redrive dry run: 20 calls, reported apart (the redrive operation's statements)`,
  machine: {
    cpus: os.cpus().length,
    cpu_model: os.cpus()[0]?.model.trim(),
    memory_gb: Math.round(os.totalmem() / 2 ** 30),
    load_average_1m: +(os.loadavg()[0] as number).toFixed(2),
    node: process.version,
  },
  date: new Date().toISOString(),
  commit,
};
const previous = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
fs.writeFileSync(RESULTS, `${JSON.stringify({ ...previous, console: result }, null, 2)}\n`);
log(`merged console into bench/results.json: first page ${firstPage} ms, API p99 ${apiP99} ms`);
