import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { alive, isDown, killNow, livePids, Spawned, stopChildren } from './children.js';
import { type RelayReport, TIMEOUT_EXIT_CODE } from './relay-protocol.js';

const ENTRY = fileURLToPath(new URL('./relay-process.ts', import.meta.url));

/** What the relay processes did over a run, summed. */
export interface FleetStats {
  invocations: number;
  /** Invocations that threw (Lambda reports an error; the process lives on). */
  invocation_errors: number;
  /** Invocations that outlived their budget: the process exited as Lambda kills it. */
  invocations_over_budget: number;
  /** Longest invocation that returned (ms); over the budget only if it was not stopped. */
  longest_invocation_ms: number;
  /** Processes that died on their own (uncaught exception, ...), not by the suite, a timeout or a poison row. */
  crashes: number;
  /** Processes that killed themselves on a poison row (chaos machinery, poison-crash.ts). */
  poison_crashes: number;
  /** Processes the suite SIGKILLed. */
  killed: number;
  claimed: number;
  published: number;
  retried: number;
  dead_lettered: number;
  lease_lost: number;
  /** Processes alive at the end that were no slot's (started twice): a suite bug, the run fails. */
  strays: number;
}

interface Slot {
  index: number;
  child?: ChildProcess;
  expectKill: boolean;
  /** The process said it is killing itself on a poison row. */
  poisonCrash: boolean;
  stderrTail: string;
}

export interface RelayFleetOptions {
  count: number;
  /** Environment of every relay process; each also gets AWS_LAMBDA_FUNCTION_NAME=chaos-relay-<n>. */
  env: Record<string, string>;
  /** Relay number (1-based) that reports events published without sending them. */
  brokenRelay?: number;
  logDir: string;
  say: (line: string) => void;
}

/**
 * The relay processes of one chaos run: started, SIGKILLed and restarted by
 * pid, and stopped at the end. Restarts happen on their own after a timeout
 * exit or a crash, as Lambda would start a fresh sandbox.
 */
export class RelayFleet {
  readonly stats: FleetStats = {
    invocations: 0,
    invocation_errors: 0,
    invocations_over_budget: 0,
    longest_invocation_ms: 0,
    crashes: 0,
    poison_crashes: 0,
    killed: 0,
    claimed: 0,
    published: 0,
    retried: 0,
    dead_lettered: 0,
    lease_lost: 0,
    strays: 0,
  };
  /** Evidence: first lines of what went wrong (errors, crashes). */
  readonly samples: { errors: string[]; crashes: string[] } = { errors: [], crashes: [] };
  /** Each crash on a poison row: the row and the other rows of its batch. */
  readonly poisonCrashes: Array<{ poisonId: string; neighbours: string[] }> = [];
  private readonly slots: Slot[];
  private stopping = false;
  private readonly spawned = new Spawned();

  constructor(private readonly options: RelayFleetOptions) {
    fs.mkdirSync(options.logDir, { recursive: true });
    this.slots = Array.from({ length: options.count }, (_, i) => ({
      index: i + 1,
      expectKill: false,
      poisonCrash: false,
      stderrTail: '',
    }));
  }

  get size(): number {
    return this.slots.length;
  }

  /** Pids of the relay processes alive now. */
  pids(): number[] {
    return livePids(this.slots.map((s) => s.child));
  }

  async start(): Promise<void> {
    await Promise.all(this.slots.map((slot) => this.spawn(slot)));
  }

  private logFile(slot: Slot): string {
    return path.join(this.options.logDir, `relay-${slot.index}.log`);
  }

  private spawn(slot: Slot): Promise<void> {
    const log = fs.openSync(this.logFile(slot), 'a');
    // The relay handler imports the library as `pg-lambda-outbox/...`: the
    // condition resolves that to the TypeScript sources (package.json "exports").
    const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=outbox-source', ENTRY], {
      stdio: ['ignore', log, 'pipe', 'ipc'],
      env: {
        ...process.env,
        ...this.options.env,
        AWS_LAMBDA_FUNCTION_NAME: `chaos-relay-${slot.index}`,
        CHAOS_BROKEN: this.options.brokenRelay === slot.index ? '1' : '0',
      },
    });
    fs.closeSync(log);
    slot.child = child;
    this.spawned.add(child);
    slot.expectKill = false;
    slot.poisonCrash = false;
    slot.stderrTail = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      fs.appendFileSync(this.logFile(slot), chunk);
      slot.stderrTail = (slot.stderrTail + chunk.toString()).slice(-2000);
    });
    const ready = new Promise<void>((resolve) => {
      child.on('message', (report: RelayReport) => {
        if (report.type === 'ready') resolve();
        else if (report.type === 'poison-crash') {
          slot.poisonCrash = true;
          this.poisonCrashes.push({ poisonId: report.poisonId, neighbours: report.neighbours });
        } else this.record(report);
      });
      child.once('exit', () => resolve());
    });
    child.once('exit', (code, signal) => this.exited(slot, child, code, signal));
    return ready;
  }

  private record(report: RelayReport) {
    const s = this.stats;
    if (report.type === 'invocation') {
      s.invocations++;
      s.longest_invocation_ms = Math.max(s.longest_invocation_ms, report.ms);
      s.claimed += report.claimed;
      s.published += report.published;
      s.retried += report.retried;
      s.dead_lettered += report.deadLettered;
      s.lease_lost += report.leaseLost;
    } else if (report.type === 'error') {
      s.invocations++;
      s.invocation_errors++;
      if (this.samples.errors.length < 5) this.samples.errors.push(report.error);
    }
  }

  private exited(slot: Slot, child: ChildProcess, code: number | null, signal: NodeJS.Signals | null) {
    if (slot.child !== child) return;
    if (this.stopping) return;
    if (slot.expectKill) {
      this.stats.killed++;
      return; // the fault injector restarts it after its pause
    }
    if (slot.poisonCrash) {
      this.stats.poison_crashes++;
      // Lambda starts a fresh sandbox for the next invocation.
      setTimeout(() => {
        if (!this.stopping && isDown(slot.child)) void this.spawn(slot);
      }, 500);
      return;
    }
    if (code === TIMEOUT_EXIT_CODE) {
      this.stats.invocations++;
      this.stats.invocations_over_budget++;
    } else {
      this.stats.crashes++;
      if (this.samples.crashes.length < 5) {
        const lines = slot.stderrTail.trim().split('\n').slice(-6).join(' | ');
        this.samples.crashes.push(`relay-${slot.index} exit ${code ?? signal}: ${lines}`.slice(0, 600));
      }
      this.options.say(`relay-${slot.index} died (exit ${code ?? signal}); restarting`);
      // A relay that cannot even start must not restart in a tight loop.
      setTimeout(() => {
        if (!this.stopping && isDown(slot.child)) void this.spawn(slot);
      }, 1_000);
      return;
    }
    void this.spawn(slot);
  }

  /** SIGKILLs relay `index` (1-based); call {@link restart} to bring it back. */
  kill(index: number): boolean {
    const slot = this.slots[index - 1];
    const pid = slot?.child?.pid;
    if (!slot?.child || !pid || !alive(slot.child)) return false;
    slot.expectKill = true;
    process.kill(pid, 'SIGKILL');
    return true;
  }

  async restart(index: number): Promise<void> {
    const slot = this.slots[index - 1];
    if (!slot || this.stopping || !isDown(slot.child)) return;
    await this.spawn(slot);
  }

  /** Brings back every relay the suite killed and has not restarted yet. */
  async restartAll(): Promise<void> {
    await Promise.all(this.slots.map((s) => this.restart(s.index)));
  }

  /** Asks every relay to finish its invocation and exit; SIGKILLs those still up after `graceMs`. */
  async stop(graceMs = 25_000): Promise<void> {
    this.stopping = true;
    this.stats.strays = this.spawned.strays(this.slots.map((s) => s.child)).length;
    await stopChildren(this.spawned.live(), graceMs);
  }

  /** Synchronous last resort (process exit): SIGKILL every child by pid. */
  killAllNow(): void {
    killNow(livePids(this.spawned.live()));
  }
}
