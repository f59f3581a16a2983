// The scale policy's decisions as tables of scenarios: pure functions of
// what a run observed (lib/relay/scale-policy.ts), no database, no clock.
import { describe, expect, it } from 'vitest';
import {
  afterLook,
  backlogCalls,
  exitStep,
  isSurplus,
  MIN_RUN_MS,
  MIN_WOKEN_TAIL_MS,
  measureStep,
  PROBE_CHECK_MS,
  PROBE_JOIN_MS,
  PROBE_SETTLE_MS,
  type Probe,
  relaysToStart,
  SCALE_CHECK_MS,
  SCALE_IN_EMPTY_CHECK_MS,
  SCALE_IN_MS,
  scaleInTrigger,
  wokenIdleTail,
} from '../../lib/relay/scale-policy.js';

const thresholds = { scaleOutBacklog: 1_000, scaleOutAgeMs: 10_000 };

describe('backlogCalls', () => {
  it.each([
    ['nothing waits', { ready: 0, lagMs: 0 }, false],
    ['a few fresh events', { ready: 20, lagMs: 50 }, false],
    ['the count reached', { ready: 1_000, lagMs: 0 }, true],
    ['claims running 10 s behind, however few wait', { ready: 5, lagMs: 10_000 }, true],
    // F4: rows behind a dead letter are old, but no claim takes them: the claims' lag stays small.
    ['old rows behind a blocked aggregate, fresh claims', { ready: 4, lagMs: 30 }, false],
  ])('%s', (_, backlog, calls) => {
    expect(backlogCalls(backlog, thresholds)).toBe(calls);
  });
});

describe('relaysToStart', () => {
  const base = {
    mySlot: 0,
    maxRelays: 8,
    slots: { held: 1, running: 1, lowest: 0 },
    backlogCalls: true,
    ratePerSecond: 400,
  };
  it.each([
    ['one relay with a backlog starts one', {}, 1],
    ['two running: doubles to four', { slots: { held: 2, running: 2, lowest: 0 } }, 2],
    ['no more than the free slots', { slots: { held: 6, running: 6, lowest: 0 } }, 2],
    ['every slot held (closed ones too): none', { slots: { held: 8, running: 5, lowest: 0 } }, 0],
    ['not the lowest slot: another scales', { mySlot: 3 }, 0],
    ['no backlog: none', { backlogCalls: false }, 0],
    ['publishing nothing (every target out): none', { ratePerSecond: 0 }, 0],
  ])('%s', (_, change, add) => {
    expect(relaysToStart({ ...base, ...change })).toBe(add);
  });
});

describe('measureStep', () => {
  const probe: Probe = { startedAt: 0, running: 1, added: 1, rateBefore: 100 };
  const measuring: Probe = { ...probe, measureFrom: 1_000 };
  const base = {
    probe,
    now: 100,
    running: 1,
    lowestIsMine: true,
    batchesSince: 0,
    lastShortAt: -10_000,
    rateAfter: 0,
  };
  const cases: Array<[string, Partial<typeof base>, Record<string, unknown>]> = [
    ['a relay started took a lower slot: it scales now', { lowestIsMine: false }, { kind: 'handed-over' }],
    [
      'the relays started have not joined yet: look again soon',
      {},
      { kind: 'wait', nextCheckAt: 100 + PROBE_CHECK_MS },
    ],
    [
      'all joined: the measure starts after a settling pause',
      { running: 2 },
      { kind: 'wait', probe: { ...probe, measureFrom: 100 + PROBE_SETTLE_MS } },
    ],
    ['they never joined: not measured', { now: PROBE_JOIN_MS + 1 }, { kind: 'not-joined' }],
    [
      'the window is not over',
      { probe: measuring, now: 1_500, running: 2, batchesSince: 20 },
      { kind: 'wait' },
    ],
    [
      'too few batches in the window',
      { probe: measuring, now: 2_500, running: 2, batchesSince: 3 },
      { kind: 'wait' },
    ],
    [
      'a short claim during the measure voids it',
      { probe: measuring, now: 2_500, running: 2, batchesSince: 20, lastShortAt: 900 },
      { kind: 'voided' },
    ],
    [
      'two relays at 90/s each against one at 100/s: raised',
      { probe: measuring, now: 2_500, running: 2, batchesSince: 20, rateAfter: 90 },
      { kind: 'raised', fleetBefore: 100, fleetAfter: 180 },
    ],
    [
      'within the tolerance (less than half a relay more): measured again first',
      { probe: measuring, now: 2_500, running: 2, batchesSince: 20, rateAfter: 70 },
      { kind: 'again', fleetAfter: 140, probe: { ...measuring, measureFrom: 2_500, firstAfter: 140 } },
    ],
    [
      'a second measure without a rise: the newest leave',
      {
        probe: { ...measuring, firstAfter: 140 },
        now: 2_500,
        running: 2,
        batchesSince: 20,
        rateAfter: 50,
      },
      { kind: 'park', keep: 1 },
    ],
  ];
  it.each(cases)('%s', (_, change, step) => {
    expect(measureStep({ ...base, ...change })).toMatchObject(step);
  });
});

describe('scale in', () => {
  const now = 100_000;
  it.each([
    [
      'claims full lately: stay',
      { lastFullAt: now - 1_000, lastAskedAt: -Infinity, emptyAfterWork: false },
      undefined,
    ],
    [
      'no full claim for SCALE_IN_MS',
      { lastFullAt: now - SCALE_IN_MS, lastAskedAt: -Infinity, emptyAfterWork: false },
      'short',
    ],
    [
      '...asked less than SCALE_CHECK_MS ago',
      { lastFullAt: now - SCALE_IN_MS, lastAskedAt: now - SCALE_CHECK_MS + 1, emptyAfterWork: false },
      undefined,
    ],
    ['an empty claim after work', { lastFullAt: now, lastAskedAt: -Infinity, emptyAfterWork: true }, 'empty'],
    [
      '...asked less than a second ago',
      { lastFullAt: now, lastAskedAt: now - SCALE_IN_EMPTY_CHECK_MS + 1, emptyAfterWork: true },
      undefined,
    ],
  ])('trigger: %s', (_, o, trigger) => {
    expect(scaleInTrigger({ now, ...o })).toBe(trigger);
  });

  it.each([
    [
      'no relay outlives this one: stay',
      { trigger: 'short', anotherOutlivesMe: false, backlogCalls: false },
      false,
    ],
    [
      'short claims for 5 s, another relay runs: leave',
      { trigger: 'short', anotherOutlivesMe: true, backlogCalls: false },
      true,
    ],
    // F4: a backlog nobody may claim (behind a dead letter or a held head) keeps no relay that claims short.
    [
      'short claims for 5 s, whatever waits in the table: leave',
      { trigger: 'short', anotherOutlivesMe: true, backlogCalls: true },
      true,
    ],
    [
      'an empty claim, no backlog: leave',
      { trigger: 'empty', anotherOutlivesMe: true, backlogCalls: false },
      true,
    ],
    [
      'an empty claim while a backlog calls (ordered: heads held a moment): stay',
      { trigger: 'empty', anotherOutlivesMe: true, backlogCalls: true },
      false,
    ],
  ] as const)('surplus: %s', (_, o, surplus) => {
    expect(isSurplus(o)).toBe(surplus);
  });
});

describe('leaving', () => {
  it.each([
    [
      'idle, elastic: look once the slot is released (F2)',
      { stoppedBecause: 'idle', elastic: true, lastClaimFull: false },
      { successorForBacklog: false, look: true },
    ],
    [
      'surplus: look (skipped while the relay that outlives it runs)',
      { stoppedBecause: 'surplus', elastic: true, lastClaimFull: false },
      { successorForBacklog: false, look: true },
    ],
    // A late renewal lost the slot: the run still looks, and runs again for what it finds.
    [
      'lost its slot (a late renewal): look',
      { stoppedBecause: 'busy', elastic: true, lastClaimFull: true },
      { successorForBacklog: false, look: true },
    ],
    [
      'out of time with full claims: a successor for the backlog, else look',
      { stoppedBecause: 'time', elastic: true, lastClaimFull: true },
      { successorForBacklog: true, look: true },
    ],
    [
      'always on, out of time with full claims: a successor, no look',
      { stoppedBecause: 'time', elastic: false, lastClaimFull: true },
      { successorForBacklog: true, look: false },
    ],
    [
      'always on, idle: nothing (the next scheduled run overlaps)',
      { stoppedBecause: 'idle', elastic: false, lastClaimFull: false },
      { successorForBacklog: false, look: false },
    ],
    [
      'aborted: nothing',
      { stoppedBecause: 'aborted', elastic: true, lastClaimFull: true },
      { successorForBacklog: false, look: false },
    ],
  ] as const)('exit: %s', (_, o, step) => {
    expect(exitStep(o)).toEqual(step);
  });

  it.each([
    ['the look found nothing: leave', { claimed: 0, readyLeft: false, timeLeftMs: 60_000 }, 'return'],
    [
      'the look found events, time to run: run again',
      { claimed: 3, readyLeft: false, timeLeftMs: MIN_RUN_MS },
      'rerun',
    ],
    [
      'the look found events, too little time: a successor',
      { claimed: 3, readyLeft: false, timeLeftMs: MIN_RUN_MS - 1 },
      'successor',
    ],
    [
      'no time to look, events ready: a successor',
      { claimed: undefined, readyLeft: true, timeLeftMs: 0 },
      'successor',
    ],
    [
      'no time to look, nothing ready: leave',
      { claimed: undefined, readyLeft: false, timeLeftMs: 0 },
      'return',
    ],
  ] as const)('after the look: %s', (_, o, step) => {
    expect(afterLook(o)).toBe(step);
  });
});

describe('wokenIdleTail (ski rental)', () => {
  it.each([
    [
      '512 MB: the request price (24 ms) and twice the start work (8 ms)',
      { configuredMs: 1_000, startPriceMs: 24, startWorkMs: 8 },
      40,
    ],
    [
      '256 MB: the request weighs twice as much',
      { configuredMs: 1_000, startPriceMs: 48, startWorkMs: 8 },
      64,
    ],
    [
      'a slow start (a busy database) waits longer',
      { configuredMs: 1_000, startPriceMs: 24, startWorkMs: 200 },
      424,
    ],
    ['never past the configured tail', { configuredMs: 300, startPriceMs: 24, startWorkMs: 500 }, 300],
    [
      'outside Lambda, a start that costs nothing: a poll or two',
      { configuredMs: 1_000, startPriceMs: 0, startWorkMs: 1 },
      MIN_WOKEN_TAIL_MS,
    ],
  ])('%s', (_, o, tail) => {
    expect(wokenIdleTail(o)).toBe(tail);
  });
});
