import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  acquireRelaySlot,
  parkRelaySlots,
  readyBacklog,
  relayIsSurplus,
  relaySlotState,
  releaseRelaySlot,
  renewRelaySlot,
} from '../sql/relay-slots.js';
import type { BatchPipeline } from './batch.js';
import { RateWindow } from './rate-window.js';
import type { RelayContext } from './relay.js';
import {
  backlogCalls,
  isSurplus,
  measureStep,
  PROBE_CHECK_MS,
  PROBE_JOIN_MS,
  type Probe,
  relaysToStart,
  SCALE_CHECK_MS,
} from './scale-policy.js';

/** A slot not renewed in this long is looked at (so a relay finds its slot closed within it). */
const RENEW_MAX_MS = 500;
/** Longest wait for a relay slot that is about to free up. */
const SLOT_HANDOVER_WAIT_MS = 15_000;
/** ...looking for a free slot this often meanwhile. */
const SLOT_HANDOVER_POLL_MS = 250;

/**
 * The I/O of one run's relay slot and scaling: takes, renews and releases
 * the slot, gathers what the scale policy (scale-policy.ts) decides from —
 * slots, backlog, this run's rate — and carries out its decisions: start
 * relays, close slots, leave.
 */
export class Scaler {
  readonly rates = new RateWindow(performance.now());
  /** This run's slot (-1 until taken) and its holder id. */
  slot = -1;
  private readonly holder = randomUUID();
  /** Relay runs this run started. */
  relaysStarted = 0;
  /** This run's slot was closed by the relay that scales (measured scale out). */
  slotClosed = false;
  private probe: Probe | undefined;
  private nextCheckAt = Number.NEGATIVE_INFINITY;
  private scaling = false;

  constructor(
    private readonly ctx: RelayContext,
    private readonly maxRelays: number,
    /** Its last claim's lag (ms) is what the scale policy calls lag. */
    private readonly pipeline: BatchPipeline,
  ) {}

  private get schema() {
    return this.ctx.options.schema;
  }

  /** The relay slots now (relaySlotState). */
  slots() {
    return relaySlotState(this.ctx.db, { maxRelays: this.maxRelays, schema: this.schema });
  }

  /**
   * Takes a free slot; false when all are held. When the first held slot
   * frees up soon (a run near its end: the schedule's next run of an
   * always-on relay overlaps the last one by a few seconds), waits for it.
   */
  async takeSlot(remainingMs: () => number): Promise<boolean> {
    const { db, options } = this.ctx;
    let deadline: number | undefined;
    for (;;) {
      // Held for the invocation's budget: a relay that dies frees it when its invocation would have ended.
      const holdMs = Math.min(Math.max(remainingMs(), 1_000), 86_400_000);
      const slot = await acquireRelaySlot(db, {
        holder: this.holder,
        maxRelays: this.maxRelays,
        holdMs,
        aliveMs: options.slotAliveMs,
        schema: this.schema,
      });
      if (slot !== undefined) {
        this.slot = slot;
        return true;
      }
      const now = performance.now();
      if (deadline === undefined) {
        const { nextFreeMs } = await this.slots();
        const timeLeft = remainingMs() - options.safetyMarginMs;
        if (nextFreeMs > Math.min(SLOT_HANDOVER_WAIT_MS, timeLeft / 2)) return false;
        deadline = now + nextFreeMs + 50;
      } else if (now >= deadline) return false;
      // A run releases its slot when it returns, seconds before its hold
      // (its whole budget) runs out: look again soon, not at the hold's end.
      await sleep(Math.min(SLOT_HANDOVER_POLL_MS, Math.max(0, deadline - now)));
    }
  }

  async releaseSlot(): Promise<void> {
    await releaseRelaySlot(this.ctx.db, this.slot, this.holder, this.schema).catch((error) =>
      // It frees itself when the run's budget ends.
      this.ctx.logger.warn('could not release the relay slot', { slot: this.slot, error: String(error) }),
    );
  }

  /** How often the heartbeat renews the slot: every quarter of slotAliveMs, every half second at most. */
  get renewEveryMs(): number {
    return Math.max(1, Math.min(RENEW_MAX_MS, Math.floor(this.ctx.options.slotAliveMs / 4)));
  }

  /**
   * Renews this run's slot: false once another relay took it, it lapsed (a
   * renewal that came late), or the relay that scales closed it. A failed
   * renewal says yes (it is tried again).
   */
  async stillHoldsSlot(): Promise<boolean> {
    const { db, options, logger } = this.ctx;
    const { slot, holder } = this;
    try {
      const { renewed, closed } = await renewRelaySlot(db, {
        slot,
        holder,
        aliveMs: options.slotAliveMs,
        schema: this.schema,
      });
      if (renewed) return true;
      if (closed) {
        logger.info('more relays did not raise the rate: this relay’s slot is closed; it stops claiming', {
          slot,
        });
        this.slotClosed = true;
      }
      return false;
    } catch (error) {
      logger.warn('could not renew the relay slot', { slot, error: String(error) });
      return true;
    }
  }

  /** No relay holds a slot. A failed check says yes: the caller then looks for events, which is cheap. */
  async alone(): Promise<boolean> {
    try {
      return (await this.slots()).running === 0;
    } catch (error) {
      this.ctx.logger.warn('could not look at the other relays', { error: String(error) });
      return true;
    }
  }

  /** Ready events wait (in ordered mode, perhaps behind a blocked aggregate). A failed check says no. */
  async readyEvents(): Promise<boolean> {
    try {
      const { ready } = await readyBacklog(this.ctx.db, { upTo: 1, schema: this.schema });
      return ready > 0;
    } catch (error) {
      this.ctx.logger.warn('could not look for events left behind', { error: String(error) });
      return false;
    }
  }

  /** The ready events (counted up to `scaleOutBacklog`), the claims' lag, and whether they call for relays. */
  private async backlog(): Promise<{ ready: number; lagMs: number; calls: boolean }> {
    const { options } = this.ctx;
    const { ready } = await readyBacklog(this.ctx.db, { upTo: options.scaleOutBacklog, schema: this.schema });
    const lagMs = this.pipeline.lastLagMs;
    return { ready, lagMs, calls: backlogCalls({ ready, lagMs }, options) };
  }

  /** Starts relays, counting them; the log line says why and what was seen. */
  private async start(count: number, fields: Record<string, unknown>): Promise<void> {
    await this.ctx.startRelays?.(count);
    this.relaysStarted += count;
    this.ctx.logger.info('backlog: started more relays', {
      ...fields,
      started: count,
      max_relays: this.maxRelays,
    });
  }

  /** Starts one relay run to take over (its own invocation). */
  async startSuccessor(why: string): Promise<void> {
    if (!this.ctx.startRelays) return;
    try {
      await this.ctx.startRelays(1);
      this.relaysStarted++;
      this.ctx.logger.info('events came as this relay left; it started a successor', { why });
    } catch (error) {
      this.ctx.logger.warn('could not start a successor; the schedule will publish the events', {
        error: String(error),
      });
    }
  }

  /**
   * A run out of time while claims came back full starts a successor when a
   * backlog calls and a slot is free (its own, released: not when the slot
   * was closed). Whether it started one; a failed check only costs the
   * successor: the schedule starts one.
   */
  async successorForBacklog(): Promise<boolean> {
    if (!this.ctx.startRelays || this.scaling) return false;
    this.scaling = true;
    try {
      const backlog = await this.backlog();
      if (!backlog.calls || (await this.slots()).held >= this.maxRelays) return false;
      await this.start(1, {
        why: 'the run ended with a backlog',
        ready_at_least: backlog.ready,
        lag_ms: Math.round(backlog.lagMs),
      });
      return true;
    } catch (error) {
      this.ctx.logger.warn('could not start more relays for the backlog', { error: String(error) });
      return false;
    } finally {
      this.scaling = false;
    }
  }

  /** Whether a scale check is due after a full claim (and none is under way). */
  checkDue(now: number): boolean {
    return this.ctx.startRelays !== undefined && !this.scaling && now >= this.nextCheckAt;
  }

  /**
   * Measured scale out, checked while claims come back full: the relay in
   * the lowest slot measures its rate over a window of full claims, starts
   * relays (relaysToStart) and judges what they did (measureStep); relays
   * that did not raise the rate have their slots closed for
   * `scaleOutParkMs`. A failed check only costs the scale-out. Never rejects.
   */
  async check(): Promise<void> {
    if (!this.ctx.startRelays || this.scaling) return;
    this.scaling = true;
    const now = performance.now();
    this.nextCheckAt = now + SCALE_CHECK_MS;
    try {
      if (this.probe) return await this.judge(now);
      const windowStart = this.rates.fullWindowStart(now);
      if (windowStart === undefined) {
        this.nextCheckAt = Math.max(now + PROBE_CHECK_MS, this.rates.lastShortAt + 1_000);
        return;
      }
      const slots = await this.slots();
      if (slots.lowest !== this.slot || slots.held >= this.maxRelays) return;
      const backlog = await this.backlog();
      const ratePerSecond = this.rates.rateSince(windowStart, performance.now());
      const add = relaysToStart({
        mySlot: this.slot,
        maxRelays: this.maxRelays,
        slots,
        backlogCalls: backlog.calls,
        ratePerSecond,
      });
      if (add === 0) return;
      await this.start(add, {
        why: 'a backlog while draining',
        running: slots.running,
        ready_at_least: backlog.ready,
        lag_ms: Math.round(backlog.lagMs),
        events_per_second: Math.round(ratePerSecond),
      });
      this.probe = {
        startedAt: performance.now(),
        running: slots.running,
        added: add,
        rateBefore: ratePerSecond,
      };
      this.nextCheckAt = performance.now() + PROBE_CHECK_MS;
    } catch (error) {
      // Some may have started: not measured, so no more for a while.
      this.probe = undefined;
      this.nextCheckAt = performance.now() + PROBE_JOIN_MS;
      this.ctx.logger.warn('could not start more relays for the backlog', { error: String(error) });
    } finally {
      this.scaling = false;
    }
  }

  private async judge(now: number): Promise<void> {
    const probe = this.probe as Probe;
    const { logger, options } = this.ctx;
    const state = await this.slots();
    const from = probe.measureFrom ?? now;
    const step = measureStep({
      probe,
      now,
      running: state.running,
      lowestIsMine: state.lowest === this.slot,
      batchesSince: this.rates.batchesSince(from),
      lastShortAt: this.rates.lastShortAt,
      rateAfter: this.rates.rateSince(from, performance.now()),
    });
    const fields =
      'fleetAfter' in step
        ? {
            running_before: probe.running,
            running: state.running,
            events_per_second_before: Math.round(step.fleetBefore),
            events_per_second: Math.round(step.fleetAfter),
            max_relays: this.maxRelays,
          }
        : {};
    this.probe = step.kind === 'wait' || step.kind === 'again' ? step.probe : undefined;
    if ('nextCheckAt' in step) this.nextCheckAt = step.nextCheckAt;
    switch (step.kind) {
      case 'handed-over':
        return logger.info('a relay in a lower slot scales now; not measured', { slot: this.slot });
      case 'not-joined':
        return logger.warn('relays started for the backlog did not take their slots; not measured', {
          started: probe.added,
          running: state.running,
        });
      case 'voided':
        return logger.info('the backlog ran short while more relays joined; not measured', {
          started: probe.added,
        });
      case 'raised':
        return logger.info('more relays raised the rate', fields);
      case 'again':
        return logger.info('one measure found the rate not raised; measuring again', fields);
      case 'park': {
        const closed = await parkRelaySlots(this.ctx.db, {
          slot: this.slot,
          holder: this.holder,
          keep: step.keep,
          maxRelays: this.maxRelays,
          parkMs: options.scaleOutParkMs,
          schema: this.schema,
        });
        return logger.info('more relays did not raise the rate: the newest leave; their slots stay closed', {
          ...fields,
          events_per_second_first_measure: Math.round(probe.firstAfter ?? 0),
          closed_slots: closed,
          closed_ms: options.scaleOutParkMs,
        });
      }
    }
  }

  /**
   * Scale in (scale-policy.ts, isSurplus): whether another relay holding its
   * slot for longer takes this run's work. A failed check keeps the run.
   */
  async surplus(trigger: 'short' | 'empty'): Promise<boolean> {
    try {
      const anotherOutlivesMe = await relayIsSurplus(this.ctx.db, {
        slot: this.slot,
        holder: this.holder,
        schema: this.schema,
      });
      if (!anotherOutlivesMe) return false;
      const calls = trigger === 'empty' ? (await this.backlog()).calls : false;
      return isSurplus({ trigger, anotherOutlivesMe, backlogCalls: calls });
    } catch (error) {
      this.ctx.logger.warn('could not look at the other relays', { error: String(error) });
      return false;
    }
  }
}
