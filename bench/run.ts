/**
 * `npm run bench:core` (the first part of `npm run bench`): relay throughput, latency, claim cost and memory, against
 * the real PostgreSQL and an AWS emulator, compared with the reference
 * article's relay in the same run. Prints a table, writes bench/results.json.
 * Sized for a 2-core machine; takes about two to three minutes.
 *
 * `BENCH_ONLY=claim npm run bench:core` runs only the claim figures (no emulator,
 * about a minute) and merges them into bench/results.json, keeping the other
 * keys as the last full run left them.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { CreateQueueCommand, PurgeQueueCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { build } from 'esbuild';
import pg from 'pg';
import { migrate, setNotifyTrigger } from '../lib/db/migrate.js';
import { preferGenericPlans } from '../lib/db/queryable.js';
import { withTransaction } from '../lib/db/transaction.js';
import { enqueueEvent } from '../lib/outbox/enqueue.js';
import { createAwsPublisher } from '../lib/publish/router.js';
import type { Publisher } from '../lib/publish/types.js';
import { listenSignal } from '../lib/relay/notifier.js';
import { Relay } from '../lib/relay/relay.js';
import { startLocalAws, useLocalAwsEnv } from '../scripts/local/aws-emulator.js';
import { dropDatabase, ensureDatabase, startLocalPostgres } from '../scripts/local/postgres.js';
import { insertBacklog } from './backlog.js';
import { baselineBatch } from './baseline.js';
import { claimMs, claimMsPaired, settleOrdered } from './claim-ms.js';
import { DEPLOYED_RELAY } from './relay-child.js';

const BACKLOG = Number(process.env.BENCH_BACKLOG ?? 100_000);
const BASELINE_SECONDS = Number(process.env.BENCH_BASELINE_SECONDS ?? 20);
const LATENCY_SECONDS = Number(process.env.BENCH_LATENCY_SECONDS ?? 15);
/** How long the polling relay idles while its empty claims are counted. */
const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 20);
const RELAY = { batchSize: 500, workers: 4, safetyMarginMs: 0 };
/**
 * The relay as serverless.yml deploys it: OUTBOX_BATCH_SIZE 100, the default
 * 2 workers, OUTBOX_CONCURRENCY 16, memorySize 512, and its environment. The
 * Lambda Node.js runtime starts node with heap sizes derived from memorySize
 * on the command line (new space a tenth of it, in two semi-spaces; old
 * space the rest), which win over NODE_OPTIONS; the child gets the same.
 * `before` is the environment deployed before memory was looked at
 * (NODE_OPTIONS=--enable-source-maps, glibc's default malloc arenas).
 * Keep in step with serverless.yml.
 */
const LAMBDA_MEMORY_MB = 512;
const lambdaHeapArgs = (memoryMb: number) => [
  `--max-semi-space-size=${Math.floor(memoryMb / 10 / 2)}`,
  `--max-old-space-size=${memoryMb - Math.floor(memoryMb / 10)}`,
];
const DEPLOYED = {
  ...DEPLOYED_RELAY,
  now: { nodeArgs: lambdaHeapArgs(LAMBDA_MEMORY_MB), env: { MALLOC_ARENA_MAX: '2' } },
  before: { nodeArgs: lambdaHeapArgs(LAMBDA_MEMORY_MB), env: { NODE_OPTIONS: '--enable-source-maps' } },
};
const DEPLOYED_BACKLOG = Number(process.env.BENCH_DEPLOYED_BACKLOG ?? 50_000);
const ONLY = process.env.BENCH_ONLY;
if (ONLY !== undefined && ONLY !== 'claim') throw new Error(`BENCH_ONLY: expected "claim", got "${ONLY}"`);
const log = (line: string) => process.stderr.write(`${line}\n`);
const RESULTS = new URL('./results.json', import.meta.url);

const postgres = await startLocalPostgres({ log });
await dropDatabase(postgres.adminUrl, 'outbox_bench');
const url = await ensureDatabase(postgres.adminUrl, 'outbox_bench');
await migrate({ databaseUrl: url });
// The relay's claims run on connections that keep generic plans (preferGenericPlans).
const pool = preferGenericPlans(new pg.Pool({ connectionString: url, max: 10 }));

async function fillBacklog(count: number) {
  await pool.query('TRUNCATE outbox_events');
  await insertBacklog(pool, count);
  await pool.query('VACUUM ANALYZE outbox_events');
}

/** Drain throughput, API calls and latency: needs the AWS emulator. */
async function drainAndLatency() {
  const aws = await startLocalAws({ emulator: (process.env.OUTBOX_EMULATOR as 'moto') ?? 'ministack', log });
  useLocalAwsEnv(aws.endpoint);
  const sqs = new SQSClient({ maxAttempts: 3 });
  const eventBridge = new EventBridgeClient({});
  /** Peak resident memory of the relay processes, across all drains. */
  let peakRss = 0;

  // The relay runs in a child process of its own, bundled by esbuild the way
  // serverless-esbuild bundles the Lambda, so its memory is the relay's alone
  // (no TypeScript loader, no benchmark bookkeeping).
  const childBundle = fileURLToPath(new URL('../.local/bench/drain-child.mjs', import.meta.url));
  await build({
    entryPoints: [fileURLToPath(new URL('./drain-child.ts', import.meta.url))],
    outfile: childBundle,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    logLevel: 'error',
    // As serverless-esbuild builds the functions: with a source map, which
    // costs memory only when NODE_OPTIONS has --enable-source-maps.
    sourcemap: true,
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
  });

  /** Drains the backlog with the relay in the child process; returns events/s and API calls. */
  async function relayDrain(
    publisher: 'null' | 'sqs',
    count: number,
    queueUrl = '',
    settings?: { relay: object; concurrency: number; nodeArgs: string[]; env: Record<string, string> },
  ): Promise<{ eps: number; calls: number; rss_mb: number }> {
    await fillBacklog(count);
    const output = execFileSync(process.execPath, [...(settings?.nodeArgs ?? []), childBundle], {
      env: {
        ...process.env,
        // The deployed environment is all of it: nothing from this process.
        ...(settings ? { NODE_OPTIONS: '' } : {}),
        ...settings?.env,
        DATABASE_URL: url,
        PUBLISHER: publisher,
        QUEUE_URL: queueUrl,
        RELAY: JSON.stringify(settings?.relay ?? RELAY),
        ...(settings ? { CONCURRENCY: String(settings.concurrency) } : {}),
      },
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const result = JSON.parse(output.trim().split('\n').pop() as string);
    if (result.published !== count) throw new Error(`relay published ${result.published} of ${count}`);
    if (!settings) peakRss = Math.max(peakRss, result.rss_mb);
    return { eps: count / result.seconds, calls: result.calls, rss_mb: result.rss_mb };
  }

  /** The article's loop, until the backlog is empty or the time box runs out. */
  async function baselineDrain(
    publishOne: Parameters<typeof baselineBatch>[1],
    count: number,
  ): Promise<number> {
    await fillBacklog(count);
    const started = performance.now();
    const deadline = started + BASELINE_SECONDS * 1000;
    let done = 0;
    while (performance.now() < deadline) {
      const n = await baselineBatch(pool, publishOne, 100);
      if (n === 0) break;
      done += n;
    }
    return done / ((performance.now() - started) / 1000);
  }

  // --- drain_null -------------------------------------------------------------
  log(`drain_null: ${BACKLOG} events through a null publisher`);
  const drainNullRelay = (await relayDrain('null', BACKLOG)).eps;
  const drainNullBaseline = await baselineDrain(async () => {}, BACKLOG);

  // --- drain_sqs --------------------------------------------------------------
  log(`drain_sqs: ${BACKLOG} events to the emulator's SQS queue (${aws.source})`);
  const { QueueUrl: queueUrl } = await sqs.send(
    new CreateQueueCommand({ QueueName: `bench-${randomUUID().slice(0, 8)}` }),
  );
  const relaySqs = await relayDrain('sqs', BACKLOG, queueUrl as string);
  const drainSqsRelay = relaySqs.eps;
  const relayCallsPer1000 = (relaySqs.calls / BACKLOG) * 1000;
  await sqs.send(new PurgeQueueCommand({ QueueUrl: queueUrl }));
  let baselineCalls = 0;
  const drainSqsBaseline = await baselineDrain(async (row) => {
    baselineCalls++;
    await sqs.send(
      new SendMessageCommand({
        QueueUrl: queueUrl,
        MessageBody: JSON.stringify({
          id: row.id,
          type: row.event_type,
          aggregateId: row.aggregate_id,
          payload: row.payload,
        }),
      }),
    );
  }, BACKLOG);

  // --- memory at the deployed settings ----------------------------------------
  // Alternating runs of the tuned and the previous settings, best of two each
  // for speed and worst of two for memory, so the machine's load hits both.
  log(`rss: ${DEPLOYED_BACKLOG} events to SQS at the deployed settings, tuned vs before, twice each`);
  type MemoryRun = { eps: number; rss_mb: number };
  const memoryRuns: Record<'now' | 'before', MemoryRun[]> = { now: [], before: [] };
  for (let round = 0; round < 2; round++) {
    for (const which of ['now', 'before'] as const) {
      await sqs.send(new PurgeQueueCommand({ QueueUrl: queueUrl }));
      const run = await relayDrain('sqs', DEPLOYED_BACKLOG, queueUrl as string, {
        relay: DEPLOYED.relay,
        concurrency: DEPLOYED.concurrency,
        ...DEPLOYED[which],
      });
      memoryRuns[which].push(run);
    }
  }
  await sqs.send(new PurgeQueueCommand({ QueueUrl: queueUrl }));
  const memory = (which: 'now' | 'before') => ({
    rss_mb: Math.round(Math.max(...memoryRuns[which].map((r) => r.rss_mb))),
    eps: Math.round(Math.max(...memoryRuns[which].map((r) => r.eps))),
  });

  // --- latency at a steady 200 events/s ---------------------------------------
  const sqsPublisher = createAwsPublisher({
    routes: [{ match: '*', targets: [{ type: 'sqs', queueUrl: queueUrl as string }] }],
    sqs,
    eventBridge,
    source: 'outbox',
    concurrency: 8,
  });

  /**
   * Commit → publish latency at 200 events/s with the relay loop running:
   * woken by LISTEN/NOTIFY, or polling as deployed (behind RDS Proxy) with
   * adaptive waits up to 500 ms. Then, for polling, the relay idles for
   * IDLE_SECONDS and the empty claims it makes are counted.
   */
  async function latency(mode: 'listen' | 'polling') {
    log(
      `latency: 200 events/s for ${LATENCY_SECONDS}s, relay loop running (${mode === 'listen' ? 'LISTEN/NOTIFY on' : 'polling, no LISTEN, idle wait up to 500 ms'})`,
    );
    await pool.query('TRUNCATE outbox_events');
    await setNotifyTrigger(pool, mode === 'listen');
    const committedAt = new Map<string, number>();
    const latencies: number[] = [];
    const timing: Publisher = {
      async publish(events) {
        const outcomes = await sqsPublisher.publish(events);
        const now = performance.now();
        for (const o of outcomes) {
          const t = committedAt.get(o.eventId);
          if (o.ok && t !== undefined) latencies.push(Math.max(0, now - t));
        }
        return outcomes;
      },
    };
    let claims = 0;
    const counting = {
      query: ((text: string, values?: unknown[]) => {
        if (text.includes('SKIP LOCKED')) claims++;
        return pool.query(text, values);
      }) as pg.Pool['query'],
    };
    const signal = mode === 'listen' ? await listenSignal({ connectionString: url }) : undefined;
    const liveRelay = new Relay({
      db: counting as pg.Pool,
      publisher: timing,
      options:
        mode === 'listen'
          ? { batchSize: 100, workers: 2, safetyMarginMs: 0, idleWaitMs: 1000 }
          : { batchSize: 100, workers: 2, safetyMarginMs: 0, idleWaitMs: 500 },
      ...(signal ? { workSignal: signal } : {}),
    });
    const idleSeconds = mode === 'polling' ? IDLE_SECONDS : 0;
    const stopAt = performance.now() + LATENCY_SECONDS * 1000 + 2000 + idleSeconds * 1000;
    const relayRun = liveRelay.run({ remainingMs: () => stopAt - performance.now(), skipStats: true });
    const rate = 200;
    const produceStart = performance.now();
    let produced = 0;
    while (performance.now() - produceStart < LATENCY_SECONDS * 1000) {
      const due = Math.floor(((performance.now() - produceStart) / 1000) * rate);
      while (produced < due) {
        produced++;
        const id = randomUUID();
        await withTransaction(pool, (client) =>
          enqueueEvent(client, {
            id,
            aggregateType: 'order',
            aggregateId: `o-${produced}`,
            eventType: 'order.created',
            payload: { n: produced },
          }),
        );
        committedAt.set(id, performance.now());
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    // Let the last events out, then count claims while nothing arrives.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const claimsBeforeIdle = claims;
    await relayRun;
    const idleClaims = claims - claimsBeforeIdle;
    await signal?.close();
    await setNotifyTrigger(pool, false);
    latencies.sort((a, b) => a - b);
    const pct = (p: number) =>
      latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? NaN;
    return {
      p50: +pct(50).toFixed(1),
      p99: +pct(99).toFixed(1),
      samples: latencies.length,
      ...(idleSeconds > 0 ? { idle_claims_per_minute: Math.round((idleClaims / idleSeconds) * 60) } : {}),
    };
  }
  const latencyListen = await latency('listen');
  const latencyPolling = await latency('polling');
  await aws.stop();
  return {
    emulator: aws.source,
    drain_null: {
      relay_eps: Math.round(drainNullRelay),
      baseline_eps: Math.round(drainNullBaseline),
      ratio: +(drainNullRelay / drainNullBaseline).toFixed(2),
    },
    drain_sqs: {
      relay_eps: Math.round(drainSqsRelay),
      baseline_eps: Math.round(drainSqsBaseline),
      ratio: +(drainSqsRelay / drainSqsBaseline).toFixed(2),
      api_calls_per_1000: +relayCallsPer1000.toFixed(1),
      baseline_api_calls_per_1000: baselineCalls > 0 ? 1000 : 0,
    },
    latency_ms: latencyListen,
    latency_polling_ms: latencyPolling,
    rss_mb: memory('now').rss_mb,
    rss_deployed: {
      rss_mb: memory('now').rss_mb,
      eps: memory('now').eps,
      before_rss_mb: memory('before').rss_mb,
      before_eps: memory('before').eps,
      bench_settings_rss_mb: Math.round(peakRss),
    },
  };
}

const full = ONLY === undefined ? await drainAndLatency() : undefined;

// --- claim cost vs history --------------------------------------------------
log('claim_ms: empty table vs 1,000,000 processed rows');
await pool.query('TRUNCATE outbox_events');
await fillBacklog(1000); // 1,000 pending rows to claim from, in both cases
const claimEmpty = await claimMs(pool);
await pool.query(
  `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, attempts, processed_at)
   SELECT gen_random_uuid(), 'order', 'order-' || (g % 5000), 'order.created', '{"n":1}', 1, now() - interval '1 hour'
   FROM generate_series(1, 1000000) g`,
);
await pool.query('VACUUM ANALYZE outbox_events');
const claimMillion = await claimMs(pool);

// --- ordered claim: fresh table, and a blocked aggregate's long tail --------
// A database of its own: TRUNCATE keeps a table's statistics, and "fresh"
// means never analyzed (autovacuum is kept off it for the measurement).
log('claim_ms.ordered_fresh: 10,000 pending rows of 200 aggregates, never analyzed');
await dropDatabase(postgres.adminUrl, 'outbox_bench_fresh');
const freshUrl = await ensureDatabase(postgres.adminUrl, 'outbox_bench_fresh');
await migrate({ databaseUrl: freshUrl });
const fresh = preferGenericPlans(new pg.Pool({ connectionString: freshUrl, max: 2 }));
await fresh.query('ALTER TABLE outbox_events SET (autovacuum_enabled = false)');
await fresh.query(
  `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
   SELECT gen_random_uuid(), 'order', 'order-' || (g % 200), 'order.created', jsonb_build_object('n', g)
   FROM generate_series(1, 10000) g`,
);
const analyzed = await fresh.query(
  `SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL AS analyzed
   FROM pg_stat_user_tables WHERE relname = 'outbox_events'`,
);
if (analyzed.rows[0].analyzed) throw new Error('ordered_fresh: outbox_events was analyzed');
const claimOrderedFresh = await claimMs(fresh, { ordered: true });

log('claim_ms.ordered_blocked: 1,000,000 rows behind one blocked aggregate, plus 100 others');
await fresh.query('TRUNCATE outbox_events');
// The blocked aggregate's head backs off for an hour; its 999,999 successors wait behind it.
await fresh.query(
  `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, retry_after, attempts)
   SELECT gen_random_uuid(), 'order', 'blocked', 'order.created', jsonb_build_object('n', g),
          CASE WHEN g = 1 THEN now() + interval '1 hour' END, CASE WHEN g = 1 THEN 1 ELSE 0 END
   FROM generate_series(1, 1000000) g`,
);
await fresh.query(
  `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
   SELECT gen_random_uuid(), 'order', 'order-' || (g % 100), 'order.created', jsonb_build_object('n', g)
   FROM generate_series(1, 1000) g`,
);
const claimOrderedBlockedFresh = await claimMs(fresh, { ordered: true });
await fresh.query('VACUUM ANALYZE outbox_events');
const claimOrderedBlocked = await claimMs(fresh, { ordered: true });

// An outage as the ordered claim sees it: every aggregate's head backs off
// while its target is down, so there is nothing to claim.
log('claim_ms.ordered_held_100k: 100,000 aggregates, every head backing off');
await fresh.query('TRUNCATE outbox_events');
await fresh.query(
  `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, retry_after, attempts, waiting_for)
   SELECT gen_random_uuid(), 'order', 'order-' || g, 'order.created', jsonb_build_object('n', g),
          now() + interval '1 hour', 1, ARRAY['sqs:orders']
   FROM generate_series(1, 100000) g`,
);
const claimOrderedHeldFresh = await claimMs(fresh, { ordered: true });
await fresh.query('VACUUM ANALYZE outbox_events');
const claimOrderedHeld = await claimMs(fresh, { ordered: true });

// The shapes that used to send the ordered claim to a probe of every
// aggregate (issue 33, F1), with 100,000 aggregates each. Each is measured
// twice: as written (`first`: every measured claim would park what fills its
// second look, and is rolled back) and after the relay's own claims have
// parked it (settleOrdered), the state a relay lives in. The ratio keys are
// the worst variant of the settled state over the empty claim, measured in
// turns with it; `_first_ratio`, the same before any parking.
const AGGREGATES = 100_000;
async function heldHeads(tail: 'held back' | 'older relay') {
  await fresh.query('TRUNCATE outbox_events');
  await fresh.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, retry_after, attempts, waiting_for)
     SELECT gen_random_uuid(), 'order', 'order-' || g, 'order.created', jsonb_build_object('n', g),
            now() + interval '1 hour', 1, ARRAY['sqs:orders']
     FROM generate_series(1, $1) g`,
    [AGGREGATES],
  );
  // One event held back behind each head: complete-batch writes no
  // retry_after; a relay before it wrote retry_after = now().
  await fresh.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, retry_after, last_error)
     SELECT gen_random_uuid(), 'order', 'order-' || g, 'order.created', jsonb_build_object('n', g),
            CASE WHEN $2 THEN now() END, 'held back behind an earlier event of its aggregate'
     FROM generate_series(1, $1) g`,
    [AGGREGATES, tail === 'older relay'],
  );
}
const healthy = (count: number, prefix: string) =>
  fresh.query(
    `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
     SELECT gen_random_uuid(), 'order', $2 || g, 'order.created', jsonb_build_object('n', g)
     FROM generate_series(1, $1) g`,
    [count, prefix],
  );
// The empty claim again, in turns with each shape's (claimMsPaired): on a
// shared machine both then see the same load.
await pool.query('TRUNCATE outbox_events');
await fillBacklog(1000);
async function shape(name: string, build: () => Promise<unknown>, keep = '') {
  await build();
  await fresh.query('VACUUM ANALYZE outbox_events');
  const first = await claimMsPaired(fresh, pool, 50);
  const settleClaims = await settleOrdered(fresh, keep);
  await fresh.query('VACUUM ANALYZE outbox_events');
  const settled = await claimMsPaired(fresh, pool);
  log(
    `  ${name}: first ${first[0].toFixed(2)} ms, settled ${settled[0].toFixed(2)} ms after ${settleClaims} claims` +
      ` (empty claim meanwhile ${first[1].toFixed(2)}, ${settled[1].toFixed(2)} ms)`,
  );
  return { first: first[0] / first[1], settled: settled[0] / settled[1], ms: settled[0] };
}
log(
  'claim_ms.ordered_tails_100k: held heads with an event held back behind each, with and without 500 healthy',
);
const tails = await shape('tails', () => heldHeads('held back'));
const tailsHealthy = await shape('tails + 500 healthy', async () => {
  await heldHeads('held back');
  await healthy(500, 'healthy-');
});
log('claim_ms.ordered_hot_front: 5,000 events of one aggregate in front of 100,000 others');
async function hotFront(leased: boolean) {
  await fresh.query('TRUNCATE outbox_events');
  await healthy(5_000, 'hot-');
  await fresh.query(`UPDATE outbox_events SET aggregate_id = $1`, [leased ? 'hot-leased' : 'hot']);
  await healthy(AGGREGATES, 'order-');
  // Another relay holds the hot aggregate's head.
  if (leased) {
    await fresh.query(
      `UPDATE outbox_events SET locked_until = now() + interval '1 hour', locked_by = gen_random_uuid(), attempts = 1
       WHERE seq = (SELECT min(seq) FROM outbox_events)`,
    );
  }
}
const hot = await shape('hot front, one relay', () => hotFront(false));
const hotLeased = await shape('hot front, head leased by another relay', () => hotFront(true), 'hot-leased');
log('claim_ms.ordered_upgraded: held-back rows an older relay left mid-outage (retry_after = now())');
const upgraded = await shape('upgraded mid-outage', () => heldHeads('older relay'));
await fresh.end();
await dropDatabase(postgres.adminUrl, 'outbox_bench_fresh');

const claim = {
  empty: +claimEmpty.toFixed(3),
  million_processed: +claimMillion.toFixed(3),
  ratio: +(claimMillion / claimEmpty).toFixed(2),
  ordered_fresh: +claimOrderedFresh.toFixed(3),
  ordered_fresh_ratio: +(claimOrderedFresh / claimEmpty).toFixed(2),
  ordered_blocked: +claimOrderedBlocked.toFixed(3),
  ordered_blocked_ratio: +(claimOrderedBlocked / claimEmpty).toFixed(2),
  ordered_blocked_unanalyzed: +claimOrderedBlockedFresh.toFixed(3),
  ordered_held_100k: +claimOrderedHeld.toFixed(3),
  ordered_held_100k_ratio: +(claimOrderedHeld / claimEmpty).toFixed(2),
  ordered_held_100k_unanalyzed: +claimOrderedHeldFresh.toFixed(3),
  ordered_tails_100k: +tails.ms.toFixed(3),
  ordered_tails_100k_healthy: +tailsHealthy.ms.toFixed(3),
  ordered_tails_100k_ratio: +Math.max(tails.settled, tailsHealthy.settled).toFixed(2),
  ordered_tails_100k_first_ratio: +Math.max(tails.first, tailsHealthy.first).toFixed(2),
  ordered_hot_front: +hot.ms.toFixed(3),
  ordered_hot_front_leased: +hotLeased.ms.toFixed(3),
  ordered_hot_front_ratio: +Math.max(hot.settled, hotLeased.settled).toFixed(2),
  ordered_hot_front_first_ratio: +Math.max(hot.first, hotLeased.first).toFixed(2),
  ordered_upgraded: +upgraded.ms.toFixed(3),
  ordered_upgraded_ratio: +upgraded.settled.toFixed(2),
  ordered_upgraded_first_ratio: +upgraded.first.toFixed(2),
};

const machine = {
  cpus: os.cpus().length,
  cpu_model: os.cpus()[0]?.model,
  memory_gb: Math.round(os.totalmem() / 2 ** 30),
  node: process.version,
  postgres: (await pool.query('SHOW server_version')).rows[0].server_version,
  date: new Date().toISOString(),
};
// A claim-only run keeps every other key of the last full run as it was.
const previous = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
// Figures of other bench modules (bench/*.ts) stay as they were.
const results = full
  ? {
      ...previous,
      machine: { ...machine, emulator: full.emulator },
      config: {
        backlog: BACKLOG,
        relay: RELAY,
        sqs_concurrency: 16,
        baseline_batch: 100,
        baseline_time_box_s: BASELINE_SECONDS,
        deployed: { ...DEPLOYED, backlog: DEPLOYED_BACKLOG },
      },
      drain_null: full.drain_null,
      drain_sqs: full.drain_sqs,
      latency_ms: full.latency_ms,
      latency_polling_ms: full.latency_polling_ms,
      claim_ms: claim,
      rss_mb: full.rss_mb,
      rss_deployed: full.rss_deployed,
    }
  : {
      ...previous,
      machine: { ...previous.machine, claim_ms_date: machine.date },
      claim_ms: { ...previous.claim_ms, ...claim },
    };

const targets: Array<[string, number | undefined, string, number]> = [
  ['drain_null.relay_eps', results.drain_null?.relay_eps, '>=', 20_000],
  ['drain_null.ratio', results.drain_null?.ratio, '>=', 5],
  ['drain_sqs.ratio', results.drain_sqs?.ratio, '>=', 8],
  ['latency_ms.p50', results.latency_ms?.p50, '<=', 50],
  ['latency_ms.p99', results.latency_ms?.p99, '<=', 250],
  ['latency_polling_ms.p50', results.latency_polling_ms?.p50, '<=', 50],
  ['latency_polling_ms.p99', results.latency_polling_ms?.p99, '<=', 250],
  ['claim_ms.ratio', results.claim_ms.ratio, '<=', 2],
  ['claim_ms.ordered_fresh_ratio', results.claim_ms.ordered_fresh_ratio, '<=', 3],
  ['claim_ms.ordered_blocked_ratio', results.claim_ms.ordered_blocked_ratio, '<=', 3],
  ['claim_ms.ordered_held_100k_ratio', results.claim_ms.ordered_held_100k_ratio, '<=', 3],
  ['claim_ms.ordered_tails_100k_ratio', results.claim_ms.ordered_tails_100k_ratio, '<=', 3],
  ['claim_ms.ordered_hot_front_ratio', results.claim_ms.ordered_hot_front_ratio, '<=', 3],
  ['claim_ms.ordered_upgraded_ratio', results.claim_ms.ordered_upgraded_ratio, '<=', 3],
  ['rss_mb', results.rss_mb, '<=', 150],
];
console.log(
  `\n| metric | value | target | met |${full ? '' : ' (claim-only run: other keys from the last full run)'}\n|---|---:|---|---|`,
);
const extra: Array<[string, number | undefined]> = [
  ['drain_null.baseline_eps', results.drain_null?.baseline_eps],
  ['drain_sqs.relay_eps', results.drain_sqs?.relay_eps],
  ['rss_deployed.eps', results.rss_deployed?.eps],
  ['rss_deployed.before_rss_mb', results.rss_deployed?.before_rss_mb],
  ['rss_deployed.before_eps', results.rss_deployed?.before_eps],
  ['rss_deployed.bench_settings_rss_mb', results.rss_deployed?.bench_settings_rss_mb],
  ['drain_sqs.baseline_eps', results.drain_sqs?.baseline_eps],
  ['drain_sqs.api_calls_per_1000', results.drain_sqs?.api_calls_per_1000],
  ['latency_polling_ms.idle_claims_per_minute', results.latency_polling_ms?.idle_claims_per_minute],
  ['claim_ms.empty', results.claim_ms.empty],
  ['claim_ms.million_processed', results.claim_ms.million_processed],
  ['claim_ms.ordered_fresh', results.claim_ms.ordered_fresh],
  ['claim_ms.ordered_blocked', results.claim_ms.ordered_blocked],
  ['claim_ms.ordered_blocked_unanalyzed', results.claim_ms.ordered_blocked_unanalyzed],
  ['claim_ms.ordered_held_100k', results.claim_ms.ordered_held_100k],
  ['claim_ms.ordered_held_100k_unanalyzed', results.claim_ms.ordered_held_100k_unanalyzed],
  ['claim_ms.ordered_tails_100k_first_ratio', results.claim_ms.ordered_tails_100k_first_ratio],
  ['claim_ms.ordered_hot_front_first_ratio', results.claim_ms.ordered_hot_front_first_ratio],
  ['claim_ms.ordered_upgraded_first_ratio', results.claim_ms.ordered_upgraded_first_ratio],
];
for (const [name, value, op, target] of targets) {
  if (value === undefined) continue;
  const met = op === '>=' ? value >= target : value <= target;
  console.log(`| ${name} | ${value} | ${op} ${target} | ${met ? 'yes' : 'NO'} |`);
}
for (const [name, value] of extra) if (value !== undefined) console.log(`| ${name} | ${value} | | |`);
fs.writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
log('\nwrote bench/results.json');

await pool.end();
await postgres.stop();
