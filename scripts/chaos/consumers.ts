import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { alive, isDown, killNow, livePids, Spawned, stopChildren } from './children.js';
import type { ConsumerReport, Receipt } from './consumer-protocol.js';

const ENTRY = fileURLToPath(new URL('./consumer-process.ts', import.meta.url));

/** What the consumer processes did over a run, summed. */
export interface ConsumerFleetStats {
  batches: number;
  /** Records handled (both consumers), duplicates skipped, records not acknowledged. */
  processed: number;
  duplicates: number;
  failed_records: number;
  deleted: number;
  errors: number;
  /** Processes the suite SIGKILLed (mid-batch). */
  killed: number;
  /** Processes that died on their own. */
  crashes: number;
  /** Processes alive at the end that were no slot's (started twice): a suite bug, the run fails. */
  strays: number;
}

interface Slot {
  index: number;
  child?: ChildProcess;
  expectKill: boolean;
  inBatch: boolean;
  batchStarted?: () => void;
}

export interface ConsumerFleetOptions {
  count: number;
  env: Record<string, string>;
  logDir: string;
  say: (line: string) => void;
}

/**
 * The consumer processes of one chaos run (scripts/chaos/consumer-process.ts):
 * started, SIGKILLed mid-batch and restarted by pid. Their receipts (every
 * message they received, before handling it) are collected here.
 */
export class ConsumerFleet {
  readonly receipts: Receipt[] = [];
  readonly stats: ConsumerFleetStats = {
    batches: 0,
    processed: 0,
    duplicates: 0,
    failed_records: 0,
    deleted: 0,
    errors: 0,
    killed: 0,
    crashes: 0,
    strays: 0,
  };
  readonly errorSamples: string[] = [];
  private readonly slots: Slot[];
  private stopping = false;
  private readonly spawned = new Spawned();

  constructor(private readonly options: ConsumerFleetOptions) {
    fs.mkdirSync(options.logDir, { recursive: true });
    this.slots = Array.from({ length: options.count }, (_, i) => ({
      index: i + 1,
      expectKill: false,
      inBatch: false,
    }));
  }

  get size(): number {
    return this.slots.length;
  }

  pids(): number[] {
    return livePids(this.slots.map((s) => s.child));
  }

  async start(): Promise<void> {
    await Promise.all(this.slots.map((slot) => this.spawn(slot)));
  }

  private spawn(slot: Slot): Promise<void> {
    const file = path.join(this.options.logDir, `consumer-${slot.index}.log`);
    const log = fs.openSync(file, 'a');
    const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=outbox-source', ENTRY], {
      stdio: ['ignore', log, log, 'ipc'],
      env: { ...process.env, ...this.options.env, CHAOS_PROCESS: `consumer-${slot.index}` },
    });
    fs.closeSync(log);
    slot.child = child;
    this.spawned.add(child);
    slot.expectKill = false;
    slot.inBatch = false;
    const ready = new Promise<void>((resolve) => {
      child.on('message', (report: ConsumerReport) => {
        if (report.type === 'ready') resolve();
        else this.record(slot, report);
      });
      child.once('exit', () => resolve());
    });
    child.once('exit', (code, signal) => {
      if (slot.child !== child || this.stopping) return;
      slot.inBatch = false;
      if (slot.expectKill) {
        this.stats.killed++;
        return; // the fault injector restarts it
      }
      this.stats.crashes++;
      this.options.say(`consumer-${slot.index} died (exit ${code ?? signal}); restarting`);
      setTimeout(() => {
        if (!this.stopping && isDown(slot.child)) void this.spawn(slot);
      }, 1_000);
    });
    return ready;
  }

  private record(slot: Slot, report: ConsumerReport) {
    const s = this.stats;
    switch (report.type) {
      case 'received':
        for (const item of report.items) this.receipts.push(item);
        return;
      case 'batch-start':
        slot.inBatch = true;
        slot.batchStarted?.();
        return;
      case 'batch-done':
        slot.inBatch = false;
        s.batches++;
        s.processed += report.processed;
        s.duplicates += report.duplicates;
        s.failed_records += report.failed;
        s.deleted += report.deleted;
        return;
      case 'error':
        s.errors++;
        if (this.errorSamples.length < 5) this.errorSamples.push(report.error);
        return;
    }
  }

  /**
   * SIGKILLs consumer `index` (1-based) while it is handling a batch: at its
   * next `batch-start` (or at once if it is in one), after `delayMs`. Resolves
   * whether it was killed (false: no batch within `waitMs`).
   */
  async killMidBatch(index: number, delayMs: number, waitMs = 5_000): Promise<boolean> {
    const slot = this.slots[index - 1];
    if (!slot?.child || !alive(slot.child)) return false;
    if (!slot.inBatch) {
      const started = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), waitMs);
        slot.batchStarted = () => {
          clearTimeout(timer);
          resolve(true);
        };
      });
      slot.batchStarted = undefined;
      if (!started) return false;
    }
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    const child = slot.child;
    if (!child?.pid || !alive(child) || this.stopping) return false;
    slot.expectKill = true;
    process.kill(child.pid, 'SIGKILL');
    return true;
  }

  async restart(index: number): Promise<void> {
    const slot = this.slots[index - 1];
    if (!slot || this.stopping || !isDown(slot.child)) return;
    await this.spawn(slot);
  }

  async restartAll(): Promise<void> {
    await Promise.all(this.slots.map((s) => this.restart(s.index)));
  }

  /**
   * Waits until the queue is empty (nothing visible or in flight, twice in a
   * row) and no process is in a batch, or `timeoutMs` passed.
   */
  async drain(sqs: SQSClient, queueUrl: string, timeoutMs: number): Promise<{ complete: boolean }> {
    const started = Date.now();
    let empties = 0;
    while (Date.now() - started < timeoutMs) {
      const { Attributes } = await sqs
        .send(
          new GetQueueAttributesCommand({
            QueueUrl: queueUrl,
            AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
          }),
        )
        .catch(() => ({ Attributes: undefined }));
      const depth = Attributes
        ? Number(Attributes.ApproximateNumberOfMessages ?? 0) +
          Number(Attributes.ApproximateNumberOfMessagesNotVisible ?? 0)
        : -1;
      if (depth === 0 && this.slots.every((s) => !s.inBatch)) {
        if (++empties >= 3) return { complete: true };
      } else empties = 0;
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
    return { complete: false };
  }

  /** Asks every consumer to finish its batch and exit; SIGKILLs those still up after `graceMs`. */
  async stop(graceMs = 20_000): Promise<void> {
    this.stopping = true;
    this.stats.strays = this.spawned.strays(this.slots.map((s) => s.child)).length;
    await stopChildren(this.spawned.live(), graceMs);
  }

  /** Synchronous last resort (process exit): SIGKILL every child by pid. */
  killAllNow(): void {
    killNow(livePids(this.spawned.live()));
  }
}
