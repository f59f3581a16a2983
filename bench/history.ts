/**
 * `npm run bench:history` (the last part of `npm run bench`): the outbox with a long history,
 * against the local PostgreSQL (a database of its own, `outbox_bench_history`).
 * No AWS emulator: the relay publishes to the null publisher, so what is
 * measured is the database side.
 *
 * 1. claim_ms: the claim of 100 rows (bench/claim-ms.ts, median of 200) with
 *    1,000 pending rows and nothing else, then with the same pending rows
 *    behind BENCH_HISTORY (10,000,000) published rows spread over the last
 *    14 days. Unordered (the target) and ordered.
 * 2. cleanup: runCleanup (lib/operations/cleanup.ts, defaults: 7 days'
 *    retention, 5,000 rows per DELETE) on that history, so about half of it
 *    is due: rows deleted per second alone, and while a relay (a process of
 *    its own, bench/drain-child.ts, null publisher, batch 500 × 4 workers)
 *    drains a BENCH_HISTORY_BACKLOG (200,000) backlog; the drain's rate with
 *    and without cleanup beside it, and with cleanup limited to
 *    BENCH_CLEANUP_CAP (5,000) rows/s, in turn, BENCH_REPEAT (3) times each;
 *    and how long VACUUM takes to clear what the cleanup alone deleted.
 * 3. partitioning: the same history copied into a table partitioned by day
 *    on created_at (schema `part`, the same columns, checks and indexes, the
 *    primary key widened to (id, created_at) as PostgreSQL requires; the
 *    relay reaches it through search_path). Claim cost and drain rate there,
 *    and retention by DETACH PARTITION CONCURRENTLY + DROP TABLE instead of
 *    DELETE, timed, also while a relay drains.
 *
 * History rows carry a small payload (about 60 bytes), one of 50,000
 * aggregates, created at an even pace over 14 days and published 40 ms
 * later. They are loaded with the table's secondary indexes dropped and
 * built again afterwards (ten times faster than inserting through them),
 * then VACUUM ANALYZE, as autovacuum would have left a table that old.
 *
 * Merges `claim_ms.history_10m*`, `cleanup` and `partitioning` into
 * bench/results.json and leaves every other key as it is.
 *
 * Env: BENCH_HISTORY (default 10,000,000), BENCH_HISTORY_BACKLOG (200,000),
 * BENCH_REPEAT (3), BENCH_CLEANUP_SECONDS (cleanup alone, default 20),
 * BENCH_CLEANUP_CAP (5,000).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { runCleanup } from '../lib/operations/cleanup.js';
import { dropDatabase, ensureDatabase, startLocalPostgres } from '../scripts/local/postgres.js';
import { insertBacklog } from './backlog.js';
import { claimMs } from './claim-ms.js';

const HISTORY = Number(process.env.BENCH_HISTORY ?? 10_000_000);
const BACKLOG = Number(process.env.BENCH_HISTORY_BACKLOG ?? 200_000);
const REPEAT = Number(process.env.BENCH_REPEAT ?? 3);
const CLEANUP_SECONDS = Number(process.env.BENCH_CLEANUP_SECONDS ?? 20);
/** The rate limit (maxRowsPerSecond) of the second cleanup beside a drain. */
const CLEANUP_CAP = Number(process.env.BENCH_CLEANUP_CAP ?? 5_000);
const HISTORY_DAYS = 14;
const RETENTION_DAYS = 7;
const RELAY = { batchSize: 500, workers: 4, safetyMarginMs: 0 };
const RESULTS = new URL('./results.json', import.meta.url);
const log = (line: string) => process.stderr.write(`${line}\n`);
const seconds = (since: number) => (performance.now() - since) / 1000;
const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;
const round = (value: number, digits = 0) => +value.toFixed(digits);

const postgres = await startLocalPostgres({ log });
await dropDatabase(postgres.adminUrl, 'outbox_bench_history');
const url = await ensureDatabase(postgres.adminUrl, 'outbox_bench_history');
await migrate({ databaseUrl: url });
const pool = new pg.Pool({ connectionString: url, max: 6 });
/** The same database, with the partitioned copy of the table first on the search path. */
const partUrl = `${url}?options=${encodeURIComponent('-c search_path=part,public')}`;
const partPool = new pg.Pool({ connectionString: partUrl, max: 6 });

/** `count` pending rows of 50 aggregates (payload as bench/run.ts's backlog), created now. */
async function addPending(db: pg.Pool, count: number) {
  await insertBacklog(db, count);
  await db.query('VACUUM ANALYZE outbox_events');
}

/** Runs bench/drain-child.ts (the relay, null publisher) until the backlog is gone. */
function drain(databaseUrl: string): Promise<{ published: number; eps: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn('npx', ['tsx', '--conditions=outbox-source', 'bench/drain-child.ts'], {
      env: { ...process.env, DATABASE_URL: databaseUrl, PUBLISHER: 'null', RELAY: JSON.stringify(RELAY) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`drain-child exited with ${code}`));
      const result = JSON.parse(out.trim().split('\n').pop() as string);
      resolve({ published: result.published, eps: result.published / result.seconds });
    });
  });
}

/** Deletes with runCleanup until `until()` says stop; rows per second. */
async function cleanupWhile(
  until: () => boolean,
  maxRowsPerSecond: number | null = null,
): Promise<{ deleted: number; seconds: number }> {
  const started = performance.now();
  let deleted = 0;
  while (!until()) {
    // One short run at a time (about a second of batches), as a scheduled
    // cleanup would continue: the stop condition is checked between runs.
    const runStarted = performance.now();
    const report = await runCleanup(
      { db: pool, options: { outboxRetentionDays: RETENTION_DAYS, safetyMarginMs: 0, maxRowsPerSecond } },
      { remainingMs: () => 1_000 - (performance.now() - runStarted) },
    );
    deleted += report.outboxEvents.deleted;
    if (report.outboxEvents.finished)
      throw new Error('cleanup ran out of rows to delete: raise BENCH_HISTORY');
  }
  return { deleted, seconds: seconds(started) };
}

async function tableMb(db: pg.Pool, table: string) {
  const { rows } = await db.query(
    `SELECT pg_table_size($1::regclass) AS heap, pg_indexes_size($1::regclass) AS idx`,
    [table],
  );
  return { table_mb: round(rows[0].heap / 2 ** 20), indexes_mb: round(rows[0].idx / 2 ** 20) };
}

// --- 1. claim cost: 1,000 pending rows alone, then behind the history -------
log(`claim_ms: 1,000 pending rows, then the same behind ${HISTORY.toLocaleString('en')} published rows`);
await addPending(pool, 1000);
const claimEmpty = await claimMs(pool);
const claimEmptyOrdered = await claimMs(pool, { ordered: true });
await pool.query('TRUNCATE outbox_events');

log('loading the history (secondary indexes dropped and built again)');
let started = performance.now();
const { rows: secondary } = await pool.query(
  `SELECT indexname, indexdef FROM pg_indexes
   WHERE schemaname = 'public' AND tablename = 'outbox_events'
     AND indexname NOT IN ('outbox_events_pkey', 'outbox_events_seq_key')`,
);
for (const index of secondary) await pool.query(`DROP INDEX ${index.indexname}`);
await pool.query(
  'ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_pkey, DROP CONSTRAINT outbox_events_seq_key',
);
const CHUNK = 500_000;
const chunks: Array<[number, number]> = [];
for (let from = 1; from <= HISTORY; from += CHUNK) chunks.push([from, Math.min(HISTORY, from + CHUNK - 1)]);
// Two loaders at a time (the machine has two cores); seq is assigned as rows
// arrive, so it follows created_at only roughly, as with concurrent producers.
async function loader() {
  for (let chunk = chunks.shift(); chunk; chunk = chunks.shift()) {
    await pool.query(
      `INSERT INTO outbox_events
         (id, aggregate_type, aggregate_id, event_type, payload, attempts, created_at, processed_at, first_processed_at)
       SELECT gen_random_uuid(), 'order', 'order-' || (g % 50000), 'order.created',
              jsonb_build_object('orderId', g, 'totalCents', g * 7 % 100000, 'currency', 'SEK'),
              1, t.at, t.at + interval '40 milliseconds', t.at + interval '40 milliseconds'
       FROM generate_series($1::int, $2::int) g,
            LATERAL (SELECT now() - $4::int * interval '1 day' * (1 - g::float8 / $3::int)) AS t(at)`,
      [chunk[0], chunk[1], HISTORY, HISTORY_DAYS],
    );
  }
}
await Promise.all([loader(), loader()]);
await pool.query('ALTER TABLE outbox_events ADD PRIMARY KEY (id), ADD UNIQUE (seq)');
for (const index of secondary) await pool.query(index.indexdef);
await pool.query('VACUUM ANALYZE outbox_events');
const loadSeconds = seconds(started);
const historySize = await tableMb(pool, 'outbox_events');
log(`  ${loadSeconds.toFixed(0)} s; table ${historySize.table_mb} MB, indexes ${historySize.indexes_mb} MB`);

await addPending(pool, 1000);
const claimHistory = await claimMs(pool);
const claimHistoryOrdered = await claimMs(pool, { ordered: true });
log(
  `  empty ${claimEmpty.toFixed(3)} ms, history ${claimHistory.toFixed(3)} ms` +
    ` (ordered ${claimEmptyOrdered.toFixed(3)} / ${claimHistoryOrdered.toFixed(3)})`,
);

// --- 3a. the partitioned copy (made before cleanup deletes anything) --------
log('partitioned copy: one partition a day, the same history');
started = performance.now();
await pool.query('DELETE FROM outbox_events WHERE processed_at IS NULL');
await pool.query('CREATE SCHEMA part');
await pool.query(
  `CREATE TABLE part.outbox_events
     (LIKE public.outbox_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)
   PARTITION BY RANGE (created_at)`,
);
const { rows: days } = await pool.query(
  `SELECT d AS from, d + interval '1 day' AS to, to_char(d, 'YYYYMMDD') AS name
   FROM generate_series(date_trunc('day', now()) - $1::int * interval '1 day',
                        date_trunc('day', now()) + interval '2 days', interval '1 day') d`,
  [HISTORY_DAYS + 1],
);
for (const day of days) {
  await pool.query(
    `CREATE TABLE part.outbox_events_${day.name} PARTITION OF part.outbox_events
       FOR VALUES FROM ('${day.from.toISOString()}') TO ('${day.to.toISOString()}')
       WITH (fillfactor = 50)`,
  );
}
await pool.query('INSERT INTO part.outbox_events OVERRIDING SYSTEM VALUE SELECT * FROM public.outbox_events');
await pool.query(
  `SELECT setval(pg_get_serial_sequence('part.outbox_events', 'seq'),
                 (SELECT max(seq) FROM public.outbox_events))`,
);
// Every index of the plain table; unique ones must include the partition key.
await pool.query(
  'ALTER TABLE part.outbox_events ADD PRIMARY KEY (id, created_at), ADD UNIQUE (seq, created_at)',
);
for (const index of secondary) {
  await pool.query(
    (index.indexdef as string)
      .replace(`INDEX ${index.indexname}`, `INDEX part_${index.indexname}`)
      .replace('ON public.outbox_events', 'ON part.outbox_events'),
  );
}
await pool.query('VACUUM ANALYZE part.outbox_events');
const partitions = days.length;
log(`  ${partitions} partitions, ${seconds(started).toFixed(0)} s`);
await addPending(pool, 1000);
await addPending(partPool, 1000);
const claimPartitioned = await claimMs(partPool);
const claimPartitionedOrdered = await claimMs(partPool, { ordered: true });
log(`  claim ${claimPartitioned.toFixed(3)} ms (ordered ${claimPartitionedOrdered.toFixed(3)})`);
await pool.query('DELETE FROM outbox_events WHERE processed_at IS NULL');
await partPool.query('DELETE FROM outbox_events WHERE processed_at IS NULL');

// --- 2. cleanup by DELETE, alone and beside a drain; 3b. drains on the ---
// partitioned table. One round of each kind in turn, BENCH_REPEAT rounds.
log(`cleanup alone for ${CLEANUP_SECONDS} s`);
const aloneStarted = performance.now();
// Autovacuum is kept off the table until the VACUUM below has been timed,
// so that it clears exactly what this cleanup deleted.
await pool.query('ALTER TABLE outbox_events SET (autovacuum_enabled = false)');
const cleanupAlone = await cleanupWhile(() => seconds(aloneStarted) >= CLEANUP_SECONDS);
log(`  ${round(cleanupAlone.deleted / cleanupAlone.seconds)} rows/s; VACUUM of the rows it deleted`);
started = performance.now();
await pool.query('VACUUM outbox_events');
const vacuumSeconds = seconds(started);
await pool.query('ALTER TABLE outbox_events RESET (autovacuum_enabled)');
log(`  ${cleanupAlone.deleted.toLocaleString('en')} rows, ${vacuumSeconds.toFixed(1)} s`);

const drains = {
  plain: [] as number[],
  withCleanup: [] as number[],
  withCappedCleanup: [] as number[],
  partitioned: [] as number[],
};
const duringDrain = { deleted: 0, seconds: 0 };
const duringDrainCapped = { deleted: 0, seconds: 0 };
/** A drain of a fresh backlog with cleanup deleting beside it until the drain ends. */
async function drainBesideCleanup(maxRowsPerSecond: number | null, into: typeof duringDrain) {
  await addPending(pool, BACKLOG);
  let done = false;
  const drained = drain(url).finally(() => {
    done = true;
  });
  const cleaned = await cleanupWhile(() => done, maxRowsPerSecond);
  into.deleted += cleaned.deleted;
  into.seconds += cleaned.seconds;
  return { eps: (await drained).eps, rowsPerSecond: cleaned.deleted / cleaned.seconds };
}
for (let round_ = 1; round_ <= REPEAT; round_++) {
  log(`drains, round ${round_} of ${REPEAT}: ${BACKLOG.toLocaleString('en')} events each`);
  await addPending(pool, BACKLOG);
  const plain = await drain(url);
  drains.plain.push(plain.eps);

  const withCleanup = await drainBesideCleanup(null, duringDrain);
  drains.withCleanup.push(withCleanup.eps);
  const withCapped = await drainBesideCleanup(CLEANUP_CAP, duringDrainCapped);
  drains.withCappedCleanup.push(withCapped.eps);

  await addPending(partPool, BACKLOG);
  const partitioned = await drain(partUrl);
  drains.partitioned.push(partitioned.eps);
  log(
    `  plain ${round(plain.eps)} eps, beside cleanup ${round(withCleanup.eps)} eps` +
      ` (${round(withCleanup.rowsPerSecond)} rows/s deleted), beside cleanup capped at ${CLEANUP_CAP}/s` +
      ` ${round(withCapped.eps)} eps (${round(withCapped.rowsPerSecond)} rows/s), partitioned ${round(partitioned.eps)} eps`,
  );
}

// --- 3c. retention by dropping partitions, while a relay drains -------------
log('partitioned retention: DETACH PARTITION CONCURRENTLY + DROP TABLE, beside a drain');
await addPending(partPool, BACKLOG);
const retentionCutoff = Date.now() - RETENTION_DAYS * 86_400_000;
const due = days.filter((day) => (day.to as Date).getTime() <= retentionCutoff);
let dropDone = false;
const dropDrained = drain(partUrl).finally(() => {
  dropDone = true;
});
// Let the relay get going first.
await new Promise((resolve) => setTimeout(resolve, 1_000));
const dropMs: number[] = [];
let droppedRows = 0;
for (const day of due) {
  const name = `part.outbox_events_${day.name}`;
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${name}`);
  const one = performance.now();
  // A partition that still holds an unfinished event (pending, or a dead letter) must stay.
  const unfinished = await pool.query(`SELECT 1 FROM ${name} WHERE processed_at IS NULL LIMIT 1`);
  if (unfinished.rowCount) throw new Error(`${name} holds unfinished events`);
  await pool.query(`ALTER TABLE part.outbox_events DETACH PARTITION ${name} CONCURRENTLY`);
  await pool.query(`DROP TABLE ${name}`);
  dropMs.push(performance.now() - one);
  droppedRows += rows[0].n;
}
const dropsEndedFirst = !dropDone;
const duringDrop = await dropDrained;
log(
  `  ${due.length} partitions, ${droppedRows.toLocaleString('en')} rows in ${round(dropMs.reduce((a, b) => a + b, 0))} ms;` +
    ` drain beside it ${round(duringDrop.eps)} eps${dropsEndedFirst ? '' : ' (the drain ended first)'}`,
);

// --- results -------------------------------------------------------------------
const plainEps = median(drains.plain);
const cleanupRate = cleanupAlone.deleted / cleanupAlone.seconds;
const history = {
  rows: HISTORY,
  days: HISTORY_DAYS,
  retention_days: RETENTION_DAYS,
  load_s: round(loadSeconds),
  ...historySize,
  backlog: BACKLOG,
  repeat: REPEAT,
  relay: RELAY,
  machine: {
    cpus: os.cpus().length,
    cpu_model: os.cpus()[0]?.model,
    memory_gb: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    postgres: (await pool.query('SHOW server_version')).rows[0].server_version,
    postgres_server: `${postgres.source} (${postgres.source === 'local' ? '127.0.0.1:5432, its own settings' : 'see scripts/local/postgres.ts'})`,
    date: new Date().toISOString(),
    load_average_1m: round(os.loadavg()[0] as number, 2),
  },
};
const claim = {
  history_10m_empty: round(claimEmpty, 3),
  history_10m: round(claimHistory, 3),
  history_10m_ratio: round(claimHistory / claimEmpty, 2),
  history_10m_ordered_empty: round(claimEmptyOrdered, 3),
  history_10m_ordered: round(claimHistoryOrdered, 3),
  history_10m_ordered_ratio: round(claimHistoryOrdered / claimEmptyOrdered, 2),
};
const cleanup = {
  rows_per_s: round(cleanupRate),
  ms_per_1000_rows: round(1_000_000 / cleanupRate, 1),
  rows_per_s_beside_drain: round(duringDrain.deleted / duringDrain.seconds),
  drain_eps: round(plainEps),
  drain_eps_beside_cleanup: round(median(drains.withCleanup)),
  drain_ratio: round(median(drains.withCleanup) / plainEps, 2),
  capped_rows_per_s: CLEANUP_CAP,
  capped_rows_per_s_measured: round(duringDrainCapped.deleted / duringDrainCapped.seconds),
  drain_eps_beside_capped_cleanup: round(median(drains.withCappedCleanup)),
  drain_ratio_capped: round(median(drains.withCappedCleanup) / plainEps, 2),
  vacuum_s: round(vacuumSeconds, 1),
  vacuum_rows: cleanupAlone.deleted,
  vacuum_ms_per_1000_rows: round((vacuumSeconds * 1_000_000) / cleanupAlone.deleted, 1),
};
const partitioning = {
  partitions,
  claim_ms: round(claimPartitioned, 3),
  claim_ratio_to_plain: round(claimPartitioned / claimHistory, 2),
  claim_ms_ordered: round(claimPartitionedOrdered, 3),
  claim_ordered_ratio_to_plain: round(claimPartitionedOrdered / claimHistoryOrdered, 2),
  drain_eps: round(median(drains.partitioned)),
  drain_ratio_to_plain: round(median(drains.partitioned) / plainEps, 2),
  dropped_partitions: due.length,
  dropped_rows: droppedRows,
  drop_ms: round(dropMs.reduce((a, b) => a + b, 0)),
  drop_ms_max: round(Math.max(...dropMs)),
  delete_ms_same_rows: round((droppedRows / cleanupRate) * 1000),
  drain_eps_beside_drop: round(duringDrop.eps),
};

const previous = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
fs.writeFileSync(
  RESULTS,
  `${JSON.stringify({ ...previous, claim_ms: { ...previous.claim_ms, ...claim }, history, cleanup, partitioning }, null, 2)}\n`,
);

const prefixed = (prefix: string, values: Record<string, number>) =>
  Object.entries(values).map(([key, value]) => [`${prefix}.${key}`, value] as const);
console.log('\n| metric | value | target | met |\n|---|---:|---|---|');
console.log(
  `| claim_ms.history_10m_ratio | ${claim.history_10m_ratio} | <= 2 | ${claim.history_10m_ratio <= 2 ? 'yes' : 'NO'} |`,
);
for (const [name, value] of [
  ...prefixed('claim_ms', claim),
  ...prefixed('cleanup', cleanup),
  ...prefixed('partitioning', partitioning),
]) {
  if (name !== 'claim_ms.history_10m_ratio') console.log(`| ${name} | ${value} | | |`);
}
log('\nmerged claim_ms.history_10m*, history, cleanup and partitioning into bench/results.json');

await pool.end();
await partPool.end();
await dropDatabase(postgres.adminUrl, 'outbox_bench_history');
await postgres.stop();
