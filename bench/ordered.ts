/**
 * `npm run bench:ordered` (part of `npm run bench`): ordered mode's throughput (issue 9, point 1),
 * against the local PostgreSQL (a database of its own, `outbox_bench_ordered`)
 * and MiniStack's SQS: a fresh MiniStack process and a fresh FIFO queue for
 * every drain (MiniStack's FIFO sends slow down with the messages a queue
 * and the process have taken: 2,000 messages at about 5,000/s, the next ones
 * slower and slower, so one process for the whole run would favour whatever
 * is measured first).
 *
 * - ordered_hot: one aggregate, a 10,000-event backlog. `relay_eps` is the
 *   current relay (runs of `maxPerAggregate`, its default); `before_eps` is
 *   the relay and claim of the commit before runs (e1a42b5^, checked out from
 *   git into .local/bench/ordered-before and imported as they were: one
 *   event per aggregate per claim), time-boxed to BENCH_BEFORE_SECONDS (it
 *   then sends fewer messages, which favours it); `per_aggregate_1_eps` is
 *   the current code claiming heads alone, time-boxed the same way. Ratio =
 *   relay_eps / before_eps. `one_group_ceiling_eps` is MiniStack alone: the
 *   same number of messages of one group, 10 per SendMessageBatch, each call
 *   sent when the previous one answered (as order requires), no database.
 * - ordered_many: 1,000 aggregates × 20 events, interleaved (a backlog in
 *   commit order of many busy aggregates). `ratio` = ordered drain /
 *   unordered drain of the same backlog to the same kind of FIFO queue
 *   (MessageGroupId = aggregate in both), same relay settings; `before_eps`
 *   is the old ordered relay draining the same backlog.
 *
 * Relay settings are bench/run.ts's (batch 500, 4 workers, 16 calls in
 * flight). Each figure is the median of BENCH_REPEAT (default 3) drains, run
 * alternately; one drain each with the other of maxPerAggregate 10, 50, 100
 * (`by_max_per_aggregate`). Merges `ordered_hot`, `ordered_many` and
 * `ordered_run` into bench/results.json and leaves every other key as it is.
 *
 * Env: BENCH_HOT (default 10,000), BENCH_MANY_AGGREGATES (1,000),
 * BENCH_MANY_PER (20), BENCH_REPEAT (3), BENCH_BEFORE_SECONDS (time box of
 * the old relay on the hot aggregate, default 20).
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import { RELAY_DEFAULTS } from '../lib/relay/options.js';
import { Relay } from '../lib/relay/relay.js';
import { startLocalAws } from '../scripts/local/aws-emulator.js';
import { dropDatabase, ensureDatabase, startLocalPostgres } from '../scripts/local/postgres.js';

const HOT = Number(process.env.BENCH_HOT ?? 10_000);
const MANY_AGGREGATES = Number(process.env.BENCH_MANY_AGGREGATES ?? 1_000);
const MANY_PER = Number(process.env.BENCH_MANY_PER ?? 20);
const REPEAT = Number(process.env.BENCH_REPEAT ?? 3);
const BEFORE_SECONDS = Number(process.env.BENCH_BEFORE_SECONDS ?? 20);
const RELAY = { batchSize: 500, workers: 4, safetyMarginMs: 0 };
const CONCURRENCY = 16;
const DEFAULT_RUN = RELAY_DEFAULTS.maxPerAggregate;
/** The commit before ordered runs: its relay and claim are "today's code". */
const BEFORE_COMMIT = 'e1a42b5^';
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const RESULTS = new URL('./results.json', import.meta.url);
const log = (line: string) => process.stderr.write(`${line}\n`);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const round = (n: number) => Math.round(n);

// --- the code before runs, from git ------------------------------------------
const beforeDir = path.join(ROOT, '.local/bench/ordered-before');
fs.rmSync(beforeDir, { recursive: true, force: true });
fs.mkdirSync(beforeDir, { recursive: true });
execFileSync('sh', ['-c', `git archive ${BEFORE_COMMIT} lib | tar -x -C "${beforeDir}"`], { cwd: ROOT });
const beforeCommit = execFileSync('git', ['rev-parse', '--short', BEFORE_COMMIT], {
  cwd: ROOT,
  encoding: 'utf8',
}).trim();
const before = {
  Relay: (await import(path.join(beforeDir, 'lib/relay/relay.ts'))).Relay as typeof Relay,
  createAwsPublisher: (await import(path.join(beforeDir, 'lib/publish/router.ts')))
    .createAwsPublisher as typeof createAwsPublisher,
};

// --- PostgreSQL and MiniStack ------------------------------------------------
const postgres = await startLocalPostgres({ log });
await dropDatabase(postgres.adminUrl, 'outbox_bench_ordered');
const url = await ensureDatabase(postgres.adminUrl, 'outbox_bench_ordered');
await migrate({ databaseUrl: url });
const pool = new pg.Pool({ connectionString: url, max: 10 });
// A fresh MiniStack for every drain: its SQS slows down as it goes (a FIFO
// queue's send time grows with the messages it has taken, and the process
// with all it has held), so drains measured later in one process would be
// penalized against earlier ones.
let sqs: SQSClient;
let eventBridge: EventBridgeClient;
/** An emulator given from outside (AWS_ENDPOINT_URL) is used for every drain. */
const external = process.env.AWS_ENDPOINT_URL;
async function withEmulator<T>(work: () => Promise<T>): Promise<T> {
  const aws = await startLocalAws({ emulator: 'ministack', log });
  try {
    // Clients point at this emulator explicitly: AWS_ENDPOINT_URL stays unset,
    // or the next startLocalAws would reuse this one instead of starting afresh.
    const config = {
      endpoint: aws.endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    };
    sqs = new SQSClient({ ...config, maxAttempts: 3 });
    eventBridge = new EventBridgeClient(config);
    return await work();
  } finally {
    sqs.destroy();
    eventBridge.destroy();
    await aws.stop();
    if (external === undefined) delete process.env.AWS_ENDPOINT_URL;
  }
}

/** `count` events, aggregate `a-(g % aggregates)`, ~250-byte payloads (bench/run.ts's shape). */
async function fill(count: number, aggregates: number) {
  await pool.query('TRUNCATE outbox_events');
  for (let start = 0; start < count; start += 50_000) {
    await pool.query(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
       SELECT gen_random_uuid(), 'order', 'a-' || (g % $3::int), 'order.updated',
              jsonb_build_object('orderId', g, 'customerId', 'customer-' || (g % 997),
                                 'totalCents', g * 7 % 100000, 'currency', 'SEK',
                                 'note', repeat('x', 150))
       FROM generate_series($1::int, $2::int) g`,
      [start, Math.min(count, start + 50_000) - 1, aggregates],
    );
  }
  await pool.query('VACUUM ANALYZE outbox_events');
}

type Code = 'current' | 'before';
interface Drain {
  code: Code;
  ordering: 'aggregate' | 'none';
  maxPerAggregate?: number;
  timeBoxS?: number;
}

/** Drains the backlog to a fresh FIFO queue; events published per second and SQS calls. */
async function drain(d: Drain, count: number): Promise<{ eps: number; calls: number; published: number }> {
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({
      QueueName: `bench-ordered-${randomUUID().slice(0, 8)}.fifo`,
      Attributes: { FifoQueue: 'true' },
    }),
  );
  const queueUrl = QueueUrl as string;
  let calls = 0;
  const make = d.code === 'current' ? createAwsPublisher : before.createAwsPublisher;
  const publisher = make({
    routes: [{ match: '*', targets: [{ type: 'sqs', queueUrl }] }],
    sqs,
    eventBridge,
    source: 'outbox',
    concurrency: CONCURRENCY,
    onCall: () => calls++,
  });
  const RelayClass = d.code === 'current' ? Relay : before.Relay;
  const relay = new RelayClass({
    db: pool,
    publisher,
    options: {
      ...RELAY,
      ordering: d.ordering,
      ...(d.maxPerAggregate === undefined ? {} : { maxPerAggregate: d.maxPerAggregate }),
    },
  });
  const started = performance.now();
  const stopAt = d.timeBoxS === undefined ? Infinity : started + d.timeBoxS * 1000;
  let published = 0;
  // A worker whose claim finds the aggregate held by another stops; go on
  // until the backlog is empty (or the time box is over).
  while (published < count && performance.now() < stopAt) {
    const summary = await relay.run({
      remainingMs: () => Math.min(600_000, stopAt - performance.now()),
      stopWhenIdle: true,
      skipStats: true,
    });
    published += summary.published;
  }
  const seconds = (performance.now() - started) / 1000;
  await sqs.send(new DeleteQueueCommand({ QueueUrl: queueUrl }));
  if (d.timeBoxS === undefined && published !== count) throw new Error(`published ${published} of ${count}`);
  return { eps: published / seconds, calls, published };
}

async function measure(label: string, d: Drain, count: number, aggregates: number) {
  await fill(count, aggregates);
  const result = await withEmulator(() => drain(d, count));
  log(
    `  ${label}: ${round(result.eps)} events/s (${result.published} events, ${round((result.calls / result.published) * 1000)} calls per 1,000)`,
  );
  return result;
}

/**
 * The ceiling for one message group: SendMessageBatch calls of 10 messages of
 * one group (same size as the relay's), each sent when the previous one
 * answered, as order requires; no database. Events per second.
 */
async function oneGroupCeiling(calls: number): Promise<number> {
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({
      QueueName: `bench-ceiling-${randomUUID().slice(0, 8)}.fifo`,
      Attributes: { FifoQueue: 'true' },
    }),
  );
  const body = JSON.stringify({ id: randomUUID(), note: 'x'.repeat(300) });
  const started = performance.now();
  for (let c = 0; c < calls; c++) {
    await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl,
        Entries: Array.from({ length: 10 }, (_, i) => ({
          Id: `e${i}`,
          MessageBody: body,
          MessageGroupId: 'order:a-0',
          MessageDeduplicationId: `${c}-${i}`,
        })),
      }),
    );
  }
  const eps = (calls * 10) / ((performance.now() - started) / 1000);
  await sqs.send(new DeleteQueueCommand({ QueueUrl }));
  log(
    `  MiniStack alone, one group, 10 per call in sequence, ${calls * 10} messages: ${round(eps)} events/s`,
  );
  return eps;
}

// --- ordered_hot -------------------------------------------------------------
log(`ordered_hot: one aggregate, ${HOT} events, FIFO queue on MiniStack; ${REPEAT} rounds`);
const loadAtStart = os.loadavg().map((n) => +n.toFixed(1));
const hot = {
  ceiling: [] as number[],
  current: [] as number[],
  per1: [] as number[],
  before: [] as number[],
  calls: [] as number[],
};
for (let i = 0; i < REPEAT; i++) {
  hot.ceiling.push(await withEmulator(() => oneGroupCeiling(HOT / 10)));
  const current = await measure(
    `current (runs of ${DEFAULT_RUN})`,
    { code: 'current', ordering: 'aggregate' },
    HOT,
    1,
  );
  hot.current.push(current.eps);
  hot.calls.push((current.calls / current.published) * 1000);
  hot.per1.push(
    (
      await measure(
        'current, maxPerAggregate 1',
        { code: 'current', ordering: 'aggregate', maxPerAggregate: 1, timeBoxS: BEFORE_SECONDS },
        HOT,
        1,
      )
    ).eps,
  );
  hot.before.push(
    (
      await measure(
        `before (${beforeCommit})`,
        { code: 'before', ordering: 'aggregate', timeBoxS: BEFORE_SECONDS },
        HOT,
        1,
      )
    ).eps,
  );
}

// Longer runs: one drain each, for the trade-off in docs/ordering.md.
const byMaxPerAggregate: Record<string, number> = {};
for (const per of [10, 50, 100].filter((n) => n !== DEFAULT_RUN)) {
  byMaxPerAggregate[per] = round(
    (
      await measure(
        `current, maxPerAggregate ${per}`,
        { code: 'current', ordering: 'aggregate', maxPerAggregate: per },
        HOT,
        1,
      )
    ).eps,
  );
}

// --- ordered_many ------------------------------------------------------------
const manyCount = MANY_AGGREGATES * MANY_PER;
log(`ordered_many: ${MANY_AGGREGATES} aggregates × ${MANY_PER} events, FIFO queue; ${REPEAT} rounds`);
const many = { ordered: [] as number[], unordered: [] as number[], before: [] as number[] };
for (let i = 0; i < REPEAT; i++) {
  many.ordered.push(
    (await measure('ordered', { code: 'current', ordering: 'aggregate' }, manyCount, MANY_AGGREGATES)).eps,
  );
  many.unordered.push(
    (await measure('unordered', { code: 'current', ordering: 'none' }, manyCount, MANY_AGGREGATES)).eps,
  );
  many.before.push(
    (
      await measure(
        `ordered, before (${beforeCommit})`,
        { code: 'before', ordering: 'aggregate' },
        manyCount,
        MANY_AGGREGATES,
      )
    ).eps,
  );
}

const ordered_hot = {
  relay_eps: round(median(hot.current)),
  before_eps: round(median(hot.before)),
  ratio: +(median(hot.current) / median(hot.before)).toFixed(1),
  per_aggregate_1_eps: round(median(hot.per1)),
  one_group_ceiling_eps: round(median(hot.ceiling)),
  calls_per_1000: round(median(hot.calls)),
  by_max_per_aggregate: { [DEFAULT_RUN]: round(median(hot.current)), ...byMaxPerAggregate },
  events: HOT,
};
const ordered_many = {
  ordered_eps: round(median(many.ordered)),
  unordered_eps: round(median(many.unordered)),
  ratio: +(median(many.ordered) / median(many.unordered)).toFixed(2),
  before_eps: round(median(many.before)),
  aggregates: MANY_AGGREGATES,
  events: manyCount,
};
const ordered_run = {
  date: new Date().toISOString(),
  machine: `${os.cpus().length} cores (${os.cpus()[0]?.model}), shared with other work; PostgreSQL ${(await pool.query('SHOW server_version')).rows[0].server_version}, MiniStack on the same host`,
  relay: { ...RELAY, concurrency: CONCURRENCY, maxPerAggregate: DEFAULT_RUN },
  before: `${beforeCommit}: the relay and claim before ordered runs (one event per aggregate per claim), imported from git; time-boxed to ${BEFORE_SECONDS} s on the hot aggregate, a full drain on many`,
  repeat: REPEAT,
  load_average_at_start: loadAtStart,
  load_average_at_end: os.loadavg().map((n) => +n.toFixed(1)),
  samples: Object.fromEntries(
    Object.entries({ hot, many }).map(([k, v]) => [
      k,
      Object.fromEntries(Object.entries(v).map(([name, xs]) => [name, xs.map(round)])),
    ]),
  ),
};
log(`ordered_hot: ${JSON.stringify(ordered_hot)}`);
log(`ordered_many: ${JSON.stringify(ordered_many)}`);

// Read-modify-write: only our keys.
const results = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
Object.assign(results, { ordered_hot, ordered_many, ordered_run });
fs.writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);

await pool.end();
await dropDatabase(postgres.adminUrl, 'outbox_bench_ordered');
await postgres.stop();
