import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import type { S3Client } from '@aws-sdk/client-s3';
import type { SQSClient } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { migrate } from '../../lib/db/migrate.js';
import { redriveDeadLetters } from '../../lib/operations/redrive.js';
import { dropDatabase, ensureDatabase } from '../local/postgres.js';
import { CONSUMERS, HANDLED_DDL } from './consumer-protocol.js';
import { ConsumerFleet, type ConsumerFleetStats } from './consumers.js';
import { FaultInjector, type FaultKind, type FaultRecord, type FaultTiming } from './faults.js';
import { LEDGER_DDL, type PoisonKind, Producer } from './producer.js';
import { QueueReceiver } from './receiver.js';
import { type FleetStats, RelayFleet } from './relays.js';
import { createChaosTargets } from './resources.js';
import type { Rng } from './rng.js';
import { type ProxyCounts, TargetProxy } from './target-proxy.js';
import {
  type ConsumerVerdict,
  committedTransactions,
  countLogLines,
  type DeadLetterVerdict,
  storedIds,
  tableState,
  verifyConsumers,
  verifyDeadLetters,
  verifyReceived,
} from './verify.js';

export type ChaosMode = 'standard' | 'fifo';

export interface ModeSettings {
  mode: ChaosMode;
  /** Committed events to write. */
  events: number;
  /** Time to write them in; faults run for as long. */
  produceMs: number;
  aggregates: number;
  faults: boolean;
  timing: FaultTiming;
  /** Give up waiting for the relays to drain after this long. */
  drainTimeoutMs: number;
  /** Relay number that reports events published without sending them. */
  brokenRelay?: number;
  /** OUTBOX_PUBLISHED_ROWS of the relays (default keep). */
  publishedRows?: 'keep' | 'delete';
  /** Share of transactions that write one `no_route` poison event. */
  poisonRate: number;
  /** Fractions of the events at which a `crash` poison event is written (faults only). */
  crashAt: number[];
  /** Share of events with a large payload (300 KiB–2 MiB, claim-checked through S3). */
  largeRate: number;
  /** Events (per mille, by id) whose consumer handler throws on the first delivery of a message. */
  consumerFailPerMille: number;
  /** The handler writes its row outside the consumer's transaction: the run must fail (handled_twice). */
  brokenConsumer?: boolean;
}

/** The consumer processes: how many, parallel pollers in each, the chaos queue's visibility timeout. */
export const CONSUMER_SETTINGS = { processes: 2, loops: { standard: 3, fifo: 2 }, visibilityTimeoutS: 5 };

/** The relays' settings: serverless.yml's, with time compressed about 4× (see docs/fault-injection.md, "Relays"). */
export const RELAY_SETTINGS = {
  relays: 3,
  budgetMs: 20_000,
  env: {
    OUTBOX_BATCH_SIZE: '100',
    OUTBOX_CONCURRENCY: '16',
    OUTBOX_MAX_ATTEMPTS: '3',
    OUTBOX_LEASE_MS: '10000',
    OUTBOX_SAFETY_MARGIN_MS: '5000',
    OUTBOX_IDLE_WAIT_MS: '500',
    OUTBOX_LISTEN: 'false',
    OUTBOX_BACKOFF_BASE_MS: '500',
    OUTBOX_BACKOFF_MAX_MS: '20000',
  },
};

export interface ModeResult {
  mode: ChaosMode;
  ordering: 'none' | 'aggregate';
  passed: boolean;
  failures: string[];
  events_committed: number;
  events_rolled_back: number;
  events_uncertain_settled: { committed: number; rolled_back: number };
  producer: Producer['counts'];
  produce_s: number;
  /** Seconds from the end of faults (and writes) until nothing was left unfinished; null: never. */
  drain_s_after_faults: number | null;
  lost: number;
  lost_by_destination: { queue: number; bus: number };
  rolled_back_seen: number;
  /** Rolled-back events found in the outbox table (must be 0). */
  rolled_back_stored: number;
  unknown_seen: number;
  stuck: number;
  leased_at_end: number;
  order_violations: number | null;
  order_violations_interleaved: number | null;
  duplicates: number;
  /** Redeliveries of one message (consumer failed, was killed, or the visibility timeout passed). */
  redeliveries: number;
  /** Committed events a consumer never handled (must be 0). */
  consumer_lost: number;
  /** Events whose handler effects committed twice for one consumer (must be 0). */
  handled_twice: number;
  consumer: Omit<ConsumerVerdict, 'consumer_lost' | 'handled_twice' | 'samples'> & {
    settings: {
      processes: number;
      loops: number;
      visibility_timeout_s: number;
      handler_fail_per_mille: number;
    };
    fleet: ConsumerFleetStats;
    drained: boolean;
  };
  poison: {
    committed: Record<PoisonKind, number>;
    /** Dead letters at the end that are poison / poison events not dead-lettered (must be 0). */
    dead_letters: number;
    not_dead_lettered: number;
    /** Redrives of poison dead letters during the run (each dead-lettered again). */
    redriven_during_run: number;
    /** Relay processes that killed themselves on a crash-poison row, and the rows in those batches beside it. */
    relay_crashes: number;
    crash_neighbours: number;
    /** Crash neighbours not handled by both consumers or dead-lettered (must be 0). */
    crash_neighbours_failed: number;
    /** Poison messages a consumer received (must be 0). */
    delivered: number;
    reasons: string[];
  };
  /** Events other than poison ones dead-lettered at any point (must be 0). */
  non_poison_dead_letters: number;
  replays: { runs: number; events: number; busy_skipped: number; not_handled: number };
  large_payloads: { committed: number; bytes: number; handled: number; payload_mismatch: number };
  dead_letters: number;
  dead_letters_left: number;
  final_redrive: number;
  faults: Record<FaultKind, number>;
  redriven_during_faults: number;
  relays: FleetStats;
  eventbridge_connections: ProxyCounts;
  received: { queue: number; bus_queue: number; complete: boolean };
  log_lines: Record<string, number>;
  samples: Record<string, string[]>;
  fault_log: FaultRecord[];
}

export interface ScenarioContext {
  adminUrl: string;
  awsEndpoint: string;
  emulatorPid: number;
  sqs: SQSClient;
  eventBridge: EventBridgeClient;
  s3: S3Client;
  rng: Rng;
  logDir: string;
  say: (line: string) => void;
  /** Called with the run's fleet and faults so that an interrupt can stop them. */
  register: (parts: { fleet: RelayFleet; consumers: ConsumerFleet; faults: FaultInjector }) => void;
}

const DATABASE = 'outbox_chaos';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const seconds = (ms: number) => Math.round(ms / 100) / 10;

/**
 * Waits until no event is left unfinished. When progress stalls while dead
 * letters exist (an aggregate held back behind its dead letter, in ordered
 * mode with `block`), redrives them as an operator would. Returns the time
 * taken (null: gave up) and how many dead letters were redriven.
 */
async function waitForDrain(
  pool: pg.Pool,
  timeoutMs: number,
  poison: ReadonlyMap<string, unknown>,
): Promise<{ ms: number | null; redriven: number }> {
  const started = Date.now();
  let redriven = 0;
  let last = -1;
  let lastChange = Date.now();
  while (Date.now() - started < timeoutMs) {
    const state = await tableState(pool).catch(() => undefined);
    if (state && state.unfinished === 0) return { ms: Date.now() - started, redriven };
    if (state && state.unfinished !== last) {
      last = state.unfinished;
      lastChange = Date.now();
    } else if (state && state.dead_letters_now > 0 && Date.now() - lastChange > 10_000) {
      redriven += await redriveAll(pool, poison);
      lastChange = Date.now();
    }
    await sleep(250);
  }
  return { ms: null, redriven };
}

/** Redrives every dead letter but the poison ones (they would only be dead-lettered again). */
async function redriveAll(pool: pg.Pool, poison: ReadonlyMap<string, unknown>): Promise<number> {
  const { rows } = await pool.query<{ id: string }>(
    'SELECT id::text FROM outbox_events WHERE dead_lettered_at IS NOT NULL ORDER BY seq',
  );
  const ids = rows.map((r) => r.id).filter((id) => !poison.has(id));
  let total = 0;
  for (let i = 0; i < ids.length; i += 1000) {
    const { reset } = await redriveDeadLetters(pool, {
      ids: ids.slice(i, i + 1000),
      limit: 1000,
      requestedBy: 'chaos-suite',
    });
    total += reset;
  }
  return total;
}

/** One mode of the suite: fresh database and queues, relays, producer and faults, drain, checks. */
export async function runMode(ctx: ScenarioContext, settings: ModeSettings): Promise<ModeResult> {
  const { say } = ctx;
  const fifo = settings.mode === 'fifo';
  const rng = ctx.rng.fork(settings.mode);

  await dropDatabase(ctx.adminUrl, DATABASE);
  const databaseUrl = await ensureDatabase(ctx.adminUrl, DATABASE);
  await migrate({ databaseUrl });
  const suitePool = new pg.Pool({ connectionString: databaseUrl, max: 3, application_name: 'chaos-suite' });
  const producerPool = new pg.Pool({
    connectionString: databaseUrl,
    max: 16,
    application_name: 'chaos-producer',
  });
  for (const p of [suitePool, producerPool]) p.on('error', () => {});
  await suitePool.query(LEDGER_DDL);
  await suitePool.query(HANDLED_DDL);

  const runId = `${settings.mode}-${randomBytes(4).toString('hex')}`;
  const targets = await createChaosTargets(ctx.sqs, ctx.eventBridge, ctx.s3, runId, fifo);
  const proxy = await TargetProxy.start(ctx.awsEndpoint);
  const logDir = path.join(ctx.logDir, settings.mode);
  const fleet = new RelayFleet({
    // The broken relay runs alone: beside healthy ones, adaptive polling may
    // let one of them take every batch, and the proof would prove nothing.
    count: settings.brokenRelay ? 1 : RELAY_SETTINGS.relays,
    brokenRelay: settings.brokenRelay,
    logDir,
    say,
    env: {
      ...RELAY_SETTINGS.env,
      DATABASE_URL: databaseUrl,
      OUTBOX_ROUTES: JSON.stringify(targets.routes),
      OUTBOX_ORDERING: fifo ? 'aggregate' : 'none',
      OUTBOX_PUBLISHED_ROWS: settings.publishedRows ?? 'keep',
      OUTBOX_EVENT_SOURCE: 'outbox',
      AWS_ENDPOINT_URL: ctx.awsEndpoint,
      // Only EventBridge goes through the proxy, so one target can fail alone.
      AWS_ENDPOINT_URL_EVENTBRIDGE: proxy.endpoint,
      POWERTOOLS_SERVICE_NAME: 'outbox-relay',
      POWERTOOLS_LOG_LEVEL: 'WARN',
      POWERTOOLS_METRICS_DISABLED: 'true',
      OUTBOX_LARGE_PAYLOAD_BUCKET: targets.bucket,
      CHAOS_BUDGET_MS: String(RELAY_SETTINGS.budgetMs),
    },
  });
  // The library's consumer reads the relay's queue (a poller outside Lambda).
  const consumerLoops = CONSUMER_SETTINGS.loops[settings.mode];
  const consumers = new ConsumerFleet({
    count: CONSUMER_SETTINGS.processes,
    logDir,
    say,
    env: {
      DATABASE_URL: databaseUrl,
      AWS_ENDPOINT_URL: ctx.awsEndpoint,
      CHAOS_QUEUE_URL: targets.queueUrl,
      CHAOS_LOOPS: String(consumerLoops),
      CHAOS_VISIBILITY_S: String(CONSUMER_SETTINGS.visibilityTimeoutS),
      CHAOS_FAIL_PER_MILLE: String(settings.consumerFailPerMille),
      CHAOS_BUCKET: targets.bucket,
      CHAOS_BROKEN_CONSUMER: settings.brokenConsumer ? '1' : '0',
    },
  });
  const faults = new FaultInjector({
    fleet,
    emulatorPid: ctx.emulatorPid,
    proxy,
    consumers,
    pool: suitePool,
    rng: rng.fork('faults'),
    timing: settings.timing,
    say,
  });
  ctx.register({ fleet, consumers, faults });

  const producer = new Producer({
    pool: producerPool,
    rng: rng.fork('producer'),
    events: settings.events,
    durationMs: settings.produceMs,
    aggregates: settings.aggregates,
    concurrency: 6,
    throwRate: 0.07,
    swallowRate: 0.07,
    interleaveRate: fifo ? 0.03 : 0,
    poisonRate: settings.poisonRate,
    crashAt: settings.faults ? settings.crashAt : [],
    largeRate: settings.largeRate,
  });

  let progress: NodeJS.Timeout | undefined;
  // The relay's queue is read by the consumer processes (their receipts are
  // the raw messages); the bus's queue by a plain receiver, from the start.
  const receivers = [new QueueReceiver(ctx.sqs, targets.busQueueUrl, 2)] as const;
  try {
    await Promise.all([fleet.start(), consumers.start()]);
    say(
      `${settings.mode}: ${settings.events} events over ${seconds(settings.produceMs)} s, ${settings.brokenRelay ? '1 relay' : `${RELAY_SETTINGS.relays} relays`}${fifo ? ' (ordering: aggregate, FIFO queue)' : ''}${settings.faults ? ', faults on' : ', no faults'}${settings.brokenRelay ? `, relay-${settings.brokenRelay} broken` : ''}; logs in ${logDir}`,
    );
    const started = Date.now();
    const faultsDone = new AbortController();
    progress = setInterval(async () => {
      const state = await tableState(suitePool).catch(() => undefined);
      say(
        `  ${String(seconds(Date.now() - started)).padStart(5)} s  committed ${producer.committed.size}  published ${state?.processed ?? '?'}  unfinished ${state?.unfinished ?? '?'}  received ${consumers.receipts.length}  faults ${faults.log.length}${fleet.stats.invocations_over_budget ? `  over budget ${fleet.stats.invocations_over_budget}` : ''}`,
      );
    }, 10_000);
    const faultRun = settings.faults ? faults.run(faultsDone.signal) : Promise.resolve();
    await producer.run(new AbortController().signal);
    const produceMs = Date.now() - started;
    faultsDone.abort();
    await faultRun;
    await faults.stop();
    say(`  writes and faults stopped after ${seconds(produceMs)} s; draining`);

    // Poison rows whose commit's outcome was unknown are settled by the table.
    const storedPoison = await storedIds(suitePool, [...producer.poisonUncertain.keys()]);
    for (const [id, kind] of producer.poisonUncertain)
      if (storedPoison.has(id)) producer.poison.set(id, kind);

    const drain = await waitForDrain(suitePool, settings.drainTimeoutMs, producer.poison);
    clearInterval(progress);
    // Whatever was dead-lettered during the run gets one more chance, as an operator would give it
    // (not the poison events: they would only be dead-lettered again).
    let finalRedrive = drain.redriven + (await redriveAll(suitePool, producer.poison));
    if (finalRedrive > drain.redriven) {
      say(`  redrove ${finalRedrive - drain.redriven} dead letters; draining again`);
      finalRedrive += (
        await waitForDrain(suitePool, Math.min(settings.drainTimeoutMs, 60_000), producer.poison)
      ).redriven;
    }
    await fleet.stop();
    const consumerDrain = await consumers.drain(ctx.sqs, targets.queueUrl, 120_000);
    await consumers.stop();

    // The producer's view, settled where a COMMIT's outcome was unknown.
    // An event row says its transaction committed; so does the transaction's
    // business row, which stays when the relay deletes published rows.
    const uncertainIds = [...producer.uncertain.keys()];
    const storedUncertain = await storedIds(suitePool, uncertainIds);
    const ledgered = await committedTransactions(suitePool, [...new Set(producer.uncertainTx.values())]);
    let uncertainCommitted = 0;
    for (const [id, event] of producer.uncertain) {
      if (storedUncertain.has(id) || ledgered.has(producer.uncertainTx.get(id) ?? '')) {
        producer.committed.set(id, event);
        uncertainCommitted++;
      } else producer.rolledBack.add(id);
    }
    const rolledBackStored = (await storedIds(suitePool, [...producer.rolledBack])).size;
    const table = await tableState(suitePool);

    const busQueue = await receivers[0].finish(120_000);
    const received = { queue: consumers.receipts, bus: receivers[0].messages };
    const verdict = verifyReceived(
      producer.committed,
      producer.rolledBack,
      received.queue,
      received.bus,
      fifo,
    );
    const consumerVerdict = await verifyConsumers(
      suitePool,
      Object.values(CONSUMERS),
      producer.committed,
      faults.replays,
      CONSUMERS.handle,
      fifo,
    );
    const deadLetters: DeadLetterVerdict = await verifyDeadLetters(suitePool, producer.poison);
    const poisonSeen = received.queue.filter((m) => producer.poison.has(m.eventId)).length;
    const crashNeighbours = new Set(fleet.poisonCrashes.flatMap((c) => c.neighbours));
    const handledBy = await handledEverywhere(suitePool, [...crashNeighbours]);
    const crashNeighboursFailed = [...crashNeighbours].filter(
      (id) => !producer.poison.has(id) && !handledBy.has(id),
    ).length;
    const poisonCount = (kind: PoisonKind) => [...producer.poison.values()].filter((k) => k === kind).length;

    const logText = fs
      .readdirSync(logDir)
      .filter((f) => f.startsWith('relay-'))
      .map((f) => fs.readFileSync(path.join(logDir, f), 'utf8'))
      .join('\n');
    const logLines = countLogLines(logText, {
      publish_failed: /"message":"publish failed/,
      dead_lettered: /"message":"event dead-lettered/,
      lease_lost: /lease lost/,
      sdk_request_timeout_only_warns: /throwOnRequestTimeout/,
      invocation_failed: /^invocation \d+ failed/,
      outlived_budget: /outlived its/,
      uncaught: /^(Uncaught|node:internal|.*uncaughtException)/,
    });

    const result: ModeResult = {
      mode: settings.mode,
      ordering: fifo ? 'aggregate' : 'none',
      passed: false,
      failures: [],
      events_committed: producer.committed.size,
      events_rolled_back: producer.rolledBack.size,
      events_uncertain_settled: {
        committed: uncertainCommitted,
        rolled_back: uncertainIds.length - uncertainCommitted,
      },
      producer: producer.counts,
      produce_s: seconds(produceMs),
      drain_s_after_faults: drain.ms === null ? null : seconds(drain.ms),
      lost: verdict.lost,
      lost_by_destination: verdict.lost_by_destination,
      rolled_back_seen: verdict.rolled_back_seen,
      rolled_back_stored: rolledBackStored,
      unknown_seen: verdict.unknown_seen,
      stuck: table.unfinished,
      leased_at_end: table.leased,
      order_violations: fifo ? verdict.order_violations : null,
      order_violations_interleaved: fifo ? verdict.order_violations_interleaved : null,
      duplicates: verdict.duplicates,
      redeliveries: verdict.redeliveries,
      consumer_lost: consumerVerdict.consumer_lost,
      handled_twice: consumerVerdict.handled_twice,
      consumer: {
        consumer_lost_by_consumer: consumerVerdict.consumer_lost_by_consumer,
        wrong_handled: consumerVerdict.wrong_handled,
        payload_mismatch: consumerVerdict.payload_mismatch,
        replays_not_handled: consumerVerdict.replays_not_handled,
        replays_handled_by_skip: consumerVerdict.replays_handled_by_skip,
        consumer_order_violations: consumerVerdict.consumer_order_violations,
        large_payloads_handled: consumerVerdict.large_payloads_handled,
        rows: consumerVerdict.rows,
        settings: {
          processes: CONSUMER_SETTINGS.processes,
          loops: consumerLoops,
          visibility_timeout_s: CONSUMER_SETTINGS.visibilityTimeoutS,
          handler_fail_per_mille: settings.consumerFailPerMille,
        },
        fleet: consumers.stats,
        drained: consumerDrain.complete,
      },
      poison: {
        committed: { no_route: poisonCount('no_route'), crash: poisonCount('crash') },
        dead_letters: deadLetters.poison_dead_letters,
        not_dead_lettered: deadLetters.poison_not_dead_lettered,
        redriven_during_run: faults.redrivenIds.filter((id) => producer.poison.has(id)).length,
        relay_crashes: fleet.stats.poison_crashes,
        crash_neighbours: crashNeighbours.size,
        crash_neighbours_failed: crashNeighboursFailed,
        delivered: poisonSeen,
        reasons: deadLetters.poison_reasons,
      },
      non_poison_dead_letters: deadLetters.non_poison_dead_letters,
      replays: {
        runs: faults.replays.length,
        events: faults.replays.reduce((sum, r) => sum + r.ids.length, 0),
        busy_skipped: faults.replaysBusy,
        not_handled: consumerVerdict.replays_not_handled,
      },
      large_payloads: {
        committed: producer.counts.large_payloads,
        bytes: producer.counts.large_payload_bytes,
        handled: consumerVerdict.large_payloads_handled,
        payload_mismatch: consumerVerdict.payload_mismatch,
      },
      dead_letters: table.ever_dead_lettered,
      dead_letters_left: table.dead_letters_now,
      final_redrive: finalRedrive,
      faults: faults.counts,
      redriven_during_faults: faults.redriven.reset,
      relays: fleet.stats,
      eventbridge_connections: { ...proxy.counts },
      received: {
        queue: received.queue.length,
        bus_queue: received.bus.length,
        complete: consumerDrain.complete && busQueue.complete,
      },
      log_lines: logLines,
      samples: {
        lost: verdict.samples.lost,
        order: verdict.samples.order,
        consumer_lost: consumerVerdict.samples.consumer_lost,
        handled_twice: consumerVerdict.samples.handled_twice,
        consumer_order: consumerVerdict.samples.consumer_order,
        non_poison_dead_letters: deadLetters.samples,
        consumer_errors: consumers.errorSamples,
        relay_errors: fleet.samples.errors,
        relay_crashes: fleet.samples.crashes,
        producer_errors: producer.errorSamples,
        interleave_blocked: producer.blockedSamples,
      },
      fault_log: faults.log,
    };
    const checks: Array<[string, number | null]> = [
      ['lost', result.lost],
      ['rolled_back_seen', result.rolled_back_seen],
      ['rolled_back_stored', result.rolled_back_stored],
      ['stuck', result.stuck],
      ['order_violations', result.order_violations],
      ['consumer_lost', result.consumer_lost],
      ['handled_twice', result.handled_twice],
      ['consumer_order_violations', result.consumer.consumer_order_violations],
      ['wrong_handled', result.consumer.wrong_handled],
      ['payload_mismatch', result.consumer.payload_mismatch],
      ['replays_not_handled', result.consumer.replays_not_handled],
      ['non_poison_dead_letters', result.non_poison_dead_letters],
      ['poison_not_dead_lettered', result.poison.not_dead_lettered],
      ['poison_delivered', result.poison.delivered],
      ['crash_neighbours_failed', result.poison.crash_neighbours_failed],
      // A relay or consumer process the fleet lost track of (started twice):
      // it would go on into the next mode and publish its events elsewhere.
      ['stray_processes', fleet.stats.strays + consumers.stats.strays],
    ];
    result.failures = checks.filter(([, v]) => v !== null && v > 0).map(([k, v]) => `${k} = ${v}`);
    if (!result.received.complete) result.failures.push('the queues could not be emptied');
    result.passed = result.failures.length === 0;
    return result;
  } finally {
    clearInterval(progress);
    await Promise.all(receivers.map((r) => r.abort()));
    faults.resumeNow();
    await Promise.all([fleet.stop(5_000), consumers.stop(5_000)]);
    await proxy.stop();
    await Promise.all([suitePool.end(), producerPool.end()]);
  }
}

/** Which of `ids` both consumers handled. */
async function handledEverywhere(pool: pg.Pool, ids: readonly string[]): Promise<Set<string>> {
  const { rows } = await pool.query<{ id: string }>(
    `SELECT event_id::text AS id FROM chaos_handled WHERE event_id = ANY($1::uuid[])
     GROUP BY event_id HAVING count(DISTINCT consumer) = $2`,
    [ids, Object.keys(CONSUMERS).length],
  );
  return new Set(rows.map((r) => r.id));
}
