import type { SlotState } from '../sql/relay-slots.js';
import type { ResolvedRelayOptions } from './options.js';
import { PROBE_MIN_BATCHES, PROBE_WINDOW_MS } from './rate-window.js';
import type { RelaySummary } from './report.js';

// The scale policy: what a relay run does about other relays, decided from
// what it observed, with no I/O (the shape of Kubernetes' replica
// calculator). The shell (scaler.ts, relay.ts) gathers the observations —
// its claims full or short, its rate, the ready backlog and the claims'
// lag, the slots, the time left — and acts on the decisions.

/** A draining run looks at the backlog at most this often. */
export const SCALE_CHECK_MS = 5_000;
/** A measure starts this long after the last relay started took its slot. */
export const PROBE_SETTLE_MS = 500;
/** How often the scaling relay looks whether the relays it started took their slots. */
export const PROBE_CHECK_MS = 250;
/** Relays started that have not taken their slots within this: no measure. */
export const PROBE_JOIN_MS = 10_000;
/** Scale in: a relay whose claims have not come back full for this long may leave. */
export const SCALE_IN_MS = 5_000;
/** ...and one whose claim found nothing after it had found work asks at most this often. */
export const SCALE_IN_EMPTY_CHECK_MS = 1_000;
/** A woken run's shortest idle tail: a poll or two. */
export const MIN_WOKEN_TAIL_MS = 20;
/** The least time left for a leaving run to take events that came as it left, instead of a successor. */
export const MIN_RUN_MS = 5_000;

/**
 * A backlog that calls for more relays: ready events up to the threshold,
 * or the claims running this far behind. The lag is what the claims took,
 * so events nobody may claim (behind a dead letter or a held head) never
 * make it call, however old they are.
 */
export function backlogCalls(
  b: { ready: number; lagMs: number },
  t: Pick<ResolvedRelayOptions, 'scaleOutBacklog' | 'scaleOutAgeMs'>,
): boolean {
  return b.ready >= t.scaleOutBacklog || b.lagMs >= t.scaleOutAgeMs;
}

/**
 * Measured scale out, once this run had a window of full claims: how many
 * relays to start. Only the relay in the lowest slot scales; it doubles the
 * relays running, no more than the slots free, while a backlog calls and it
 * publishes at all (every target out: more relays would publish nothing).
 */
export function relaysToStart(o: {
  mySlot: number;
  maxRelays: number;
  slots: Omit<SlotState, 'nextFreeMs'>;
  backlogCalls: boolean;
  ratePerSecond: number;
}): number {
  if (o.slots.lowest !== o.mySlot) return 0;
  const free = o.maxRelays - o.slots.held;
  if (free <= 0 || !o.backlogCalls || !(o.ratePerSecond > 0)) return 0;
  return Math.min(free, Math.max(1, o.slots.running));
}

/** A measure under way: relays started, and this relay's rate before they came. */
export interface Probe {
  startedAt: number;
  running: number;
  added: number;
  rateBefore: number;
  measureFrom?: number;
  /** The fleet's rate by the first measure, when it found no rise and a second one decides. */
  firstAfter?: number;
}

export type MeasureStep =
  /** A relay started took a lower slot: it scales from now on. */
  | { kind: 'handed-over' }
  /** The relays started have not all taken their slots yet. */
  | { kind: 'wait'; nextCheckAt: number; probe: Probe }
  | { kind: 'not-joined'; nextCheckAt: number }
  /** A claim came back short during the measure: the backlog ran out; not measured. */
  | { kind: 'voided' }
  /** The fleet's rate rose by at least half a relay's share per relay added: the next check may double. */
  | { kind: 'raised'; fleetBefore: number; fleetAfter: number; nextCheckAt: number }
  /** One measure found no rise: a second decides (one window can land on a busy moment). */
  | { kind: 'again'; fleetBefore: number; fleetAfter: number; probe: Probe; nextCheckAt: number }
  /** Two measures found no rise: close the newest relays' slots, keep those that ran before. */
  | { kind: 'park'; fleetBefore: number; fleetAfter: number; keep: number };

/**
 * The next step of a measure. `rateAfter` is this relay's rate since
 * `probe.measureFrom` (when set); `batchesSince` the batches it finished
 * since then; the fleet's rate is this relay's times the relays running.
 */
export function measureStep(o: {
  probe: Probe;
  now: number;
  running: number;
  lowestIsMine: boolean;
  batchesSince: number;
  lastShortAt: number;
  rateAfter: number;
}): MeasureStep {
  const { probe, now, running } = o;
  if (!o.lowestIsMine) return { kind: 'handed-over' };
  if (probe.measureFrom === undefined) {
    if (running >= probe.running + probe.added) {
      const measureFrom = now + PROBE_SETTLE_MS;
      return { kind: 'wait', probe: { ...probe, measureFrom }, nextCheckAt: measureFrom + PROBE_WINDOW_MS };
    }
    if (now - probe.startedAt > PROBE_JOIN_MS)
      return { kind: 'not-joined', nextCheckAt: now + PROBE_JOIN_MS };
    return { kind: 'wait', probe, nextCheckAt: now + PROBE_CHECK_MS };
  }
  const from = probe.measureFrom;
  if (now < from + PROBE_WINDOW_MS || o.batchesSince < PROBE_MIN_BATCHES) {
    return { kind: 'wait', probe, nextCheckAt: Math.max(from + PROBE_WINDOW_MS, now + PROBE_CHECK_MS) };
  }
  if (o.lastShortAt >= from - PROBE_SETTLE_MS) return { kind: 'voided' };
  const fleetBefore = probe.rateBefore * probe.running;
  const fleetAfter = o.rateAfter * running;
  if (fleetAfter > fleetBefore && fleetAfter >= probe.rateBefore * (probe.running + probe.added / 2)) {
    return { kind: 'raised', fleetBefore, fleetAfter, nextCheckAt: now };
  }
  if (probe.firstAfter === undefined) {
    return {
      kind: 'again',
      fleetBefore,
      fleetAfter,
      probe: { ...probe, measureFrom: now, firstAfter: fleetAfter },
      nextCheckAt: now + PROBE_WINDOW_MS,
    };
  }
  return { kind: 'park', fleetBefore, fleetAfter, keep: probe.running };
}

/**
 * Scale in: whether a run asks if it is surplus now. It does when its
 * claims have not come back full for SCALE_IN_MS (asking every
 * SCALE_CHECK_MS), or when a claim found nothing after the run had found
 * work (the backlog or the burst ran out; every SCALE_IN_EMPTY_CHECK_MS).
 * Not before the run found work: a relay started for a backlog may meet
 * the others' claims at its first (ordered mode).
 */
export function scaleInTrigger(o: {
  now: number;
  lastFullAt: number;
  lastAskedAt: number;
  emptyAfterWork: boolean;
}): 'short' | 'empty' | undefined {
  if (o.now - o.lastFullAt >= SCALE_IN_MS && o.now - o.lastAskedAt >= SCALE_CHECK_MS) return 'short';
  if (o.emptyAfterWork && o.now - o.lastAskedAt >= SCALE_IN_EMPTY_CHECK_MS) return 'empty';
  return undefined;
}

/**
 * Whether the run leaves the work to another relay that holds its slot for
 * longer. Claims short for SCALE_IN_MS say by themselves that this relay is
 * not needed, whatever waits in the table (events behind a blocked
 * aggregate are no work for it); one empty claim says so unless a backlog
 * calls (in ordered mode another relay's claim may hold the heads a moment).
 */
export function isSurplus(o: {
  trigger: 'short' | 'empty';
  anotherOutlivesMe: boolean;
  backlogCalls: boolean;
}): boolean {
  return o.anotherOutlivesMe && (o.trigger === 'short' || !o.backlogCalls);
}

/**
 * What a run that held a slot does as it ends:
 * - `successorForBacklog`: out of time while claims came back full, it
 *   starts a successor if a backlog calls and a slot is free;
 * - `look`: unless that started one, an elastic run looks for events
 *   committed while its slot was held, once the slot is released and no
 *   relay runs. A producer that commits while a relay holds its slot wakes
 *   nobody, so the last relay to let its slot go looks once more: a claim,
 *   in ordered mode skipping blocked aggregates. Whoever releases last sees
 *   every commit made while any slot was held (the producer commits before
 *   it looks at the slots; the relay releases before it claims). That holds
 *   for a run that lost its slot (a late renewal) too.
 * Aborted runs do neither; always-on relays do not look (the next
 * scheduled run overlaps).
 */
export function exitStep(o: {
  stoppedBecause: RelaySummary['stoppedBecause'];
  elastic: boolean;
  lastClaimFull: boolean;
}): { successorForBacklog: boolean; look: boolean } {
  if (o.stoppedBecause === 'aborted') return { successorForBacklog: false, look: false };
  return { successorForBacklog: o.stoppedBecause === 'time' && o.lastClaimFull, look: o.elastic };
}

/**
 * After the exit's look (`claimed`: what its claim took; `undefined`: not
 * made, too little time): run again for what came (it claims, drains and
 * leaves as any run), or hand over to a successor when too little time is
 * left to run, or leave.
 */
export function afterLook(o: {
  claimed: number | undefined;
  readyLeft: boolean;
  timeLeftMs: number;
}): 'rerun' | 'successor' | 'return' {
  if (o.claimed === undefined) return o.readyLeft ? 'successor' : 'return';
  if (o.claimed === 0) return 'return';
  return o.timeLeftMs >= MIN_RUN_MS ? 'rerun' : 'successor';
}

/**
 * A woken run's idle tail, by the ski-rental rule: wait for more work no
 * longer than a new start would cost, so that whatever the gaps between
 * events, the run never pays more than twice what hindsight would have.
 * A new start costs the invocation's price (`startPriceMs`: Lambda's
 * request price in ms of this function's GB-s) and the database work of a
 * start and of a leave (`startWorkMs`: look at the slots and take one; let
 * it go, look once more: about the same again). Never more than the
 * configured tail, never less than a poll or two. Runs not woken by a
 * producer keep the configured tail: without producers' wakes the next
 * event would wait for the schedule.
 */
export function wokenIdleTail(o: {
  configuredMs: number;
  startPriceMs: number;
  startWorkMs: number;
}): number {
  const startCostMs = o.startPriceMs + 2 * o.startWorkMs;
  return Math.round(Math.min(o.configuredMs, Math.max(MIN_WOKEN_TAIL_MS, startCostMs)));
}
