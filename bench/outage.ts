/**
 * `npm run bench:outage`: what an outage of a target costs the database and
 * the log. 1,000 events wait for an SQS endpoint that accepts connections
 * and never answers (every call, every probe, hangs until its timeout: the
 * costliest kind of outage); a relay with the deployed settings runs against
 * it, and we count the rows it claims (each claim and each outcome is a row
 * write) and the lines it logs at info or above.
 *
 * The clock is compressed 5×: the SDK's timeouts (3 s connect, 10 s
 * request), the circuit's probe waits (1 s doubling to 60 s) and the backoff
 * are divided by 5, so `BENCH_OUTAGE_SECONDS` (default 48) of real time is
 * four minutes of outage as deployed. Figures are per minute of deployed
 * time per 1,000 waiting events. Writes `outage` into bench/results.json and
 * leaves every other key as it is. About a minute.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { SQSClient } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { logTargetChanges } from '../lib/publish/circuit-breaker.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import { Relay } from '../lib/relay/relay.js';
import { dropDatabase, ensureDatabase, startLocalPostgres } from '../scripts/local/postgres.js';
import { insertBacklog } from './backlog.js';

const SCALE = 5;
const SECONDS = Number(process.env.BENCH_OUTAGE_SECONDS ?? 48);
const WAITING = 1_000;
const log = (line: string) => process.stderr.write(`${line}\n`);
const RESULTS = new URL('./results.json', import.meta.url);

const postgres = await startLocalPostgres({ log });
await dropDatabase(postgres.adminUrl, 'outbox_bench_outage');
const url = await ensureDatabase(postgres.adminUrl, 'outbox_bench_outage');
await migrate({ databaseUrl: url });
const pool = new pg.Pool({ connectionString: url, max: 4 });
await insertBacklog(pool, WAITING);

const held: net.Socket[] = [];
const blackHole = net.createServer((socket) => void held.push(socket.resume()));
await new Promise<void>((resolve) => blackHole.listen(0, '127.0.0.1', resolve));
const endpoint = `http://127.0.0.1:${(blackHole.address() as net.AddressInfo).port}`;

// functions/relay.ts's clients and serverless.yml's relay settings, time ÷ 5.
const sqs = new SQSClient({
  endpoint,
  region: 'us-east-1',
  credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  maxAttempts: 2,
  requestHandler: {
    connectionTimeout: 3_000 / SCALE,
    requestTimeout: 10_000 / SCALE,
    throwOnRequestTimeout: true,
  },
});
const lines: Array<{ level: string; message: string }> = [];
const at = (level: string) => (message: string) => void lines.push({ level, message });
// The relay functions' logging of the same events (lib/relay, functions/relay.ts); debug lines are not kept.
const logger = { debug: () => {}, info: at('info'), warn: at('warn'), error: at('error') };
const publisher = createAwsPublisher({
  routes: [{ match: '*', targets: [{ type: 'sqs', queueUrl: `${endpoint}/000000000000/orders` }] }],
  sqs,
  concurrency: 4,
  circuit: { failureThreshold: 3, probeBaseMs: 1_000 / SCALE, probeMaxMs: 60_000 / SCALE },
  onTargetChange: logTargetChanges(logger),
});
const relay = new Relay({
  db: pool,
  publisher,
  logger,
  options: {
    batchSize: 100,
    workers: 2,
    leaseMs: 60_000 / SCALE,
    safetyMarginMs: 0,
    backoff: { baseMs: 1_000 / SCALE, maxMs: 300_000 / SCALE },
    waitingSummaryMs: 60_000 / SCALE,
  },
});

const writesBefore = await rowWrites();
const started = performance.now();
let claimed = 0;
// One invocation per deployed minute (12 s here), as the schedule runs them.
while (performance.now() - started < SECONDS * 1000) {
  const end = Math.min(performance.now() + 60_000 / SCALE, started + SECONDS * 1000);
  const summary = await relay.run({ remainingMs: () => end - performance.now(), skipStats: true });
  claimed += summary.claimed;
  if (summary.published > 0) throw new Error('published through a black hole: the bench is broken');
}
const realSeconds = (performance.now() - started) / 1000;
await new Promise((resolve) => setTimeout(resolve, 1_500)); // statistics reach pg_stat after a moment
const writes = (await rowWrites()) - writesBefore;
const { rows } = await pool.query(
  `SELECT count(*) FILTER (WHERE dead_lettered_at IS NOT NULL)::int AS dead, max(attempts)::int AS max_attempts
   FROM outbox_events`,
);

const deployedMinutes = (realSeconds * SCALE) / 60;
const per1000PerMin = (n: number) => Math.round((n / deployedMinutes / (WAITING / 1000)) * 10) / 10;
const outage = {
  machine: `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, node ${process.version}`,
  setup: `${WAITING} events waiting for an SQS endpoint that never answers; deployed relay settings (batch 100, 2 workers, 4 calls in flight, SDK 3 s connect / 10 s request, 2 tries, probes 1 s doubling to 60 s) with time compressed ${SCALE}×; ${Math.round(deployedMinutes * 10) / 10} deployed minutes in ${Math.round(realSeconds)} s`,
  claims_per_waiting_event_per_min: Math.round((claimed / WAITING / deployedMinutes) * 100) / 100,
  row_writes_per_min_per_1000_waiting: per1000PerMin(writes),
  log_lines_per_min: Math.round((lines.length / deployedMinutes) * 10) / 10,
  log_lines_by_level: Object.fromEntries(
    ['info', 'warn', 'error'].map((level) => [level, lines.filter((l) => l.level === level).length]),
  ),
  dead_letters: rows[0].dead,
  max_attempts: rows[0].max_attempts,
  before: {
    note: 'issue 15 point 4, measured the same way (compressed clock) on 539b2b3: one 13 s invocation claimed 48,248 rows for about 2,500 waiting events and logged 45,994 warning lines in 24 s',
  },
};
log(JSON.stringify(outage, null, 2));

const results = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
results.outage = outage;
fs.writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);

for (const socket of held) socket.destroy();
blackHole.close();
await pool.end();
await dropDatabase(postgres.adminUrl, 'outbox_bench_outage');
await postgres.stop();

/** Row versions written to outbox_events (inserts not counted), per the statistics collector. */
async function rowWrites(): Promise<number> {
  const { rows } = await pool.query(
    `SELECT (n_tup_upd + n_tup_del)::bigint AS n FROM pg_stat_user_tables WHERE relname = 'outbox_events'`,
  );
  return Number(rows[0]?.n ?? 0);
}
