import type { Pool } from 'pg';
import { redriveDeadLetters } from '../../lib/operations/redrive.js';
import { replayEvents } from '../../lib/operations/replay.js';
import type { ConsumerFleet } from './consumers.js';
import type { RelayFleet } from './relays.js';
import type { Rng } from './rng.js';
import type { TargetProxy } from './target-proxy.js';

export const FAULT_KINDS = [
  'relay_kill',
  'db_terminate',
  'emulator_pause',
  'target_refuse',
  'target_blackhole',
  'redrive',
  'consumer_kill',
  'replay',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface FaultTiming {
  /** Pause between two faults (ms), drawn uniformly. */
  gapMs: [number, number];
  /** How long the emulator stays stopped. */
  pauseMs: [number, number];
  /** How long the EventBridge target stays down. */
  outageMs: [number, number];
  /** How long a killed relay stays down before it is started again. */
  downMs: [number, number];
}

/** One replay the suite ran: of every published event of one aggregate. */
export interface ReplayRecord {
  replayId: string;
  aggregateId: string;
  /** Replayed event ids, in seq order. */
  ids: string[];
  /** Wall clock before the call and after it returned (ms). */
  startedMs: number;
  endedMs: number;
}

export interface FaultDeps {
  fleet: RelayFleet;
  consumers: ConsumerFleet;
  /** The emulator process (SIGSTOP / SIGCONT). */
  emulatorPid: number;
  proxy: TargetProxy;
  /** A connection to the chaos database that is not a relay's. */
  pool: Pool;
  rng: Rng;
  timing: FaultTiming;
  say: (line: string) => void;
}

export interface FaultRecord {
  at_s: number;
  kind: FaultKind;
  detail: string;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });

/**
 * Injects faults at random (seeded) until stopped. Each round goes through
 * every kind once in a shuffled order, so even a short run sees each kind.
 * Faults with a duration (pause, outage, a relay down) run in the background
 * and may overlap with the next ones; {@link stop} ends them all.
 */
export class FaultInjector {
  readonly counts = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  readonly log: FaultRecord[] = [];
  readonly redriven = { runs: 0, reset: 0 };
  readonly replays: ReplayRecord[] = [];
  /** Replays left alone because their aggregate was busy (a relay publishing it). */
  replaysBusy = 0;
  /** Every event id a redrive reset (poison ones are counted by the suite). */
  readonly redrivenIds: string[] = [];
  private readonly replayed = new Set<string>();
  private readonly running = new Set<Promise<void>>();
  private paused = false;
  private outage = false;
  private started = Date.now();
  private readonly stopped = new AbortController();

  constructor(private readonly deps: FaultDeps) {}

  async run(signal: AbortSignal): Promise<void> {
    this.started = Date.now();
    const { rng, timing } = this.deps;
    while (!signal.aborted) {
      for (const kind of rng.shuffle(FAULT_KINDS)) {
        await sleep(rng.int(...timing.gapMs), signal);
        if (signal.aborted) return;
        await this.inject(kind).catch((error) => this.deps.say(`fault ${kind} failed: ${String(error)}`));
      }
    }
  }

  private note(kind: FaultKind, detail: string) {
    this.counts[kind]++;
    this.log.push({ at_s: Math.round((Date.now() - this.started) / 100) / 10, kind, detail });
  }

  private background(work: Promise<void>) {
    const tracked = work.catch((error) => this.deps.say(`fault failed: ${String(error)}`));
    this.running.add(tracked);
    void tracked.finally(() => this.running.delete(tracked));
  }

  private async inject(kind: FaultKind): Promise<void> {
    const { fleet, rng, timing, proxy, pool } = this.deps;
    switch (kind) {
      case 'relay_kill': {
        const index = rng.int(1, fleet.size);
        if (!fleet.kill(index)) return;
        const downMs = rng.int(...timing.downMs);
        this.note(kind, `relay-${index} SIGKILL, restarted after ${downMs} ms`);
        this.background(sleep(downMs, this.stopped.signal).then(() => fleet.restart(index)));
        return;
      }
      case 'db_terminate': {
        const { rows } = await pool.query(
          `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
           WHERE datname = current_database() AND application_name LIKE 'chaos-relay-%'`,
        );
        this.note(kind, `${rows[0].n} relay connections terminated`);
        return;
      }
      case 'emulator_pause': {
        if (this.paused) return;
        const ms = rng.int(...timing.pauseMs);
        this.paused = true;
        process.kill(this.deps.emulatorPid, 'SIGSTOP');
        this.note(kind, `emulator SIGSTOP for ${ms} ms`);
        this.background(
          sleep(ms, this.stopped.signal).then(() => {
            process.kill(this.deps.emulatorPid, 'SIGCONT');
            this.paused = false;
          }),
        );
        return;
      }
      case 'target_refuse':
      case 'target_blackhole': {
        if (this.outage) return;
        const ms = rng.int(...timing.outageMs);
        this.outage = true;
        proxy.setMode(kind === 'target_refuse' ? 'refuse' : 'blackhole');
        this.note(kind, `EventBridge ${kind === 'target_refuse' ? 'refusing' : 'black-holed'} for ${ms} ms`);
        this.background(
          sleep(ms, this.stopped.signal).then(() => {
            proxy.setMode('pass');
            this.outage = false;
          }),
        );
        return;
      }
      case 'redrive': {
        const result = await redriveDeadLetters(pool, {
          all: true,
          limit: 10_000,
          requestedBy: 'chaos-suite',
        });
        this.redriven.runs++;
        this.redriven.reset += result.reset;
        this.redrivenIds.push(...result.ids);
        this.note(kind, `${result.reset} dead letters redriven`);
        return;
      }
      case 'consumer_kill': {
        const { consumers } = this.deps;
        const index = rng.int(1, consumers.size);
        const delayMs = rng.int(0, 40);
        const downMs = rng.int(...timing.downMs);
        if (!(await consumers.killMidBatch(index, delayMs))) return;
        this.note(kind, `consumer-${index} SIGKILL mid-batch (+${delayMs} ms), restarted after ${downMs} ms`);
        this.background(sleep(downMs, this.stopped.signal).then(() => consumers.restart(index)));
        return;
      }
      case 'replay': {
        // Every published event of a few aggregates, each aggregate once per run (so that
        // the order check knows which replay each handling belongs to).
        // Among the aggregates with the most published events (a replay of one event proves little).
        const { rows } = await pool.query<{ aggregate_id: string }>(
          `SELECT aggregate_id FROM outbox_events
           WHERE processed_at IS NOT NULL AND aggregate_id LIKE 'agg-%'
           GROUP BY aggregate_id ORDER BY count(*) DESC, aggregate_id LIMIT 40`,
        );
        const candidates = rows.map((r) => r.aggregate_id).filter((a) => !this.replayed.has(a));
        const done: string[] = [];
        for (let tries = 0; tries < 6 && done.length < 3 && candidates.length > 0; tries++) {
          const aggregateId = candidates.splice(rng.int(0, candidates.length - 1), 1)[0] as string;
          const startedMs = Date.now();
          const result = await replayEvents(pool, {
            aggregateType: 'order',
            aggregateId,
            limit: 10_000,
            requestedBy: 'chaos-suite',
          });
          const endedMs = Date.now();
          if (result.busy > 0) {
            this.replaysBusy++;
            continue;
          }
          this.replayed.add(aggregateId);
          if (!result.replayId || result.replayed === 0) continue;
          this.replays.push({ replayId: result.replayId, aggregateId, ids: result.ids, startedMs, endedMs });
          done.push(`${aggregateId} (${result.replayed})`);
        }
        this.note(kind, `replayed ${done.length ? done.join(', ') : 'nothing'}`);
        return;
      }
    }
  }

  /** Ends every fault in progress: emulator continued, target up, killed relays restarted. */
  async stop(): Promise<void> {
    this.stopped.abort();
    await Promise.all([...this.running]);
    this.resumeNow();
    await Promise.all([this.deps.fleet.restartAll(), this.deps.consumers.restartAll()]);
  }

  /** Synchronous part of {@link stop}, also used on exit. */
  resumeNow(): void {
    try {
      process.kill(this.deps.emulatorPid, 'SIGCONT');
    } catch {
      // gone already
    }
    this.paused = false;
    this.deps.proxy.setMode('pass');
    this.outage = false;
  }
}
