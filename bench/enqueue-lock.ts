/**
 * `npx tsx bench/enqueue-lock.ts`: what the per-aggregate lock of
 * enqueueEvents costs producers. Each case commits one-event transactions
 * (BEGIN, enqueue, COMMIT) in rounds of `TX` transactions, alternating rounds
 * with and without `lockAggregates` (so a busy machine slows both alike), and
 * reports the median transactions per second of each. Merges the figures into
 * bench/results.json under `enqueue_lock`, keeping every other key.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { enqueueEvent } from '../lib/outbox/enqueue.js';
import { dropDatabase, ensureDatabase, startLocalPostgres } from '../scripts/local/postgres.js';

const TX = Number(process.env.BENCH_ENQUEUE_TX ?? 300);
const ROUNDS = Number(process.env.BENCH_ENQUEUE_ROUNDS ?? 9);
const PRODUCERS = 8;
const log = (line: string) => process.stderr.write(`${line}\n`);
const RESULTS = new URL('./results.json', import.meta.url);

const postgres = await startLocalPostgres({ log });
await dropDatabase(postgres.adminUrl, 'outbox_bench_enqueue');
const url = await ensureDatabase(postgres.adminUrl, 'outbox_bench_enqueue');
await migrate({ databaseUrl: url });
const pool = new pg.Pool({ connectionString: url, max: PRODUCERS });

/** Commits `TX` one-event transactions from `producers` concurrent clients; returns transactions per second. */
async function run(producers: number, aggregateOf: (i: number) => string, lock: boolean): Promise<number> {
  await pool.query('TRUNCATE outbox_events, outbox_aggregate_locks');
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: producers }, async () => {
      const client = await pool.connect();
      try {
        for (let i = next++; i < TX; i = next++) {
          await client.query('BEGIN');
          await enqueueEvent(
            client,
            {
              id: randomUUID(),
              aggregateType: 'order',
              aggregateId: aggregateOf(i),
              eventType: 'order.created',
              payload: { i },
            },
            { lockAggregates: lock },
          );
          await client.query('COMMIT');
        }
      } finally {
        client.release();
      }
    }),
  );
  return TX / ((performance.now() - started) / 1000);
}

const cases: Array<[string, number, (i: number) => string]> = [
  // Every transaction a new aggregate: the lock row is inserted (the first write of an aggregate).
  ['one_producer_new_aggregates', 1, (i) => `o-${i}`],
  // 200 aggregates written over and over: the lock row exists and is only locked.
  ['one_producer_known_aggregates', 1, (i) => `o-${i % 200}`],
  [`${PRODUCERS}_producers_distinct_aggregates`, PRODUCERS, (i) => `o-${i % 200}`],
  // Every producer writes the same aggregate: with the lock they take turns.
  [`${PRODUCERS}_producers_one_aggregate`, PRODUCERS, () => 'hot'],
];
const figures: Record<string, { with_lock_tps: number; without_lock_tps: number; cost_pct: number }> = {};
for (const [name, producers, aggregateOf] of cases) {
  const withoutRuns: number[] = [];
  const withRuns: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    withoutRuns.push(await run(producers, aggregateOf, false));
    withRuns.push(await run(producers, aggregateOf, true));
  }
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)] as number;
  const without = median(withoutRuns);
  const withLock = median(withRuns);
  figures[name] = {
    with_lock_tps: Math.round(withLock),
    without_lock_tps: Math.round(without),
    cost_pct: +((1 - withLock / without) * 100).toFixed(1),
  };
  log(`${name}: ${JSON.stringify(figures[name])}`);
}

// The statement alone, without the commit (which dominates a one-event
// transaction): ms per enqueueEvent call inside one transaction, rolled back.
async function statementMs(lock: boolean, aggregateOf: (i: number) => string): Promise<number> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const started = performance.now();
    for (let i = 0; i < TX; i++) {
      await enqueueEvent(
        client,
        { aggregateType: 'order', aggregateId: aggregateOf(i), eventType: 'order.created', payload: { i } },
        { lockAggregates: lock },
      );
    }
    const ms = (performance.now() - started) / TX;
    await client.query('ROLLBACK');
    return ms;
  } finally {
    client.release();
  }
}
const statement: Record<string, { with_lock_ms: number; without_lock_ms: number }> = {};
for (const [name, aggregateOf] of [
  ['new_aggregates', (i: number) => `s-${randomUUID()}-${i}`],
  ['known_aggregates', (i: number) => `o-${i % 200}`],
] as const) {
  await pool.query('TRUNCATE outbox_events, outbox_aggregate_locks');
  // Known aggregates: their lock rows exist, as in steady state.
  await pool.query(
    `INSERT INTO outbox_aggregate_locks (aggregate_type, aggregate_id) SELECT 'order', 'o-' || g FROM generate_series(0, 199) g`,
  );
  const withRuns: number[] = [];
  const withoutRuns: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    withoutRuns.push(await statementMs(false, aggregateOf));
    withRuns.push(await statementMs(true, aggregateOf));
  }
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)] as number;
  statement[name] = {
    with_lock_ms: +median(withRuns).toFixed(3),
    without_lock_ms: +median(withoutRuns).toFixed(3),
  };
  log(`statement ${name}: ${JSON.stringify(statement[name])}`);
}

console.log('\n| case | with lock (tx/s) | without (tx/s) | cost |\n|---|---:|---:|---:|');
for (const [name, f] of Object.entries(figures)) {
  console.log(`| ${name} | ${f.with_lock_tps} | ${f.without_lock_tps} | ${f.cost_pct}% |`);
}
console.log('\n| one enqueue statement, no commit | with lock (ms) | without (ms) |\n|---|---:|---:|');
for (const [name, f] of Object.entries(statement)) {
  console.log(`| ${name} | ${f.with_lock_ms} | ${f.without_lock_ms} |`);
}
const previous = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
fs.writeFileSync(
  RESULTS,
  `${JSON.stringify({ ...previous, enqueue_lock: { transactions_per_round: TX, rounds: ROUNDS, date: new Date().toISOString(), ...figures, statement_ms: statement } }, null, 2)}\n`,
);
log('\nwrote enqueue_lock to bench/results.json');
await pool.end();
await dropDatabase(postgres.adminUrl, 'outbox_bench_enqueue');
await postgres.stop();
