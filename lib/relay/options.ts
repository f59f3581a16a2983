import { validateSchemaName } from '../db/schema.js';
import { ConfigError } from '../errors.js';
import type { BackoffPolicy } from './backoff.js';

/** Relay settings as a caller gives them; every field has a default. */
export interface RelayOptions {
  /** Rows per claim. Default 100. */
  batchSize?: number;
  /**
   * Payload bytes per claim: a claim stops taking rows once those before
   * the next one reach this (it always takes one), so a relay's memory is
   * bounded whatever the payload sizes: a batch of 100 rows of 10 MiB would
   * otherwise be a gigabyte before the first message is sent. The Lambda
   * relay derives it from the function's memory (`OUTBOX_CLAIM_MAX_BYTES`
   * overrides). Default 32 MiB.
   */
  maxClaimBytes?: number;
  /** Claim-publish-complete loops run side by side in one invocation. Default 2. */
  workers?: number;
  /** How long a claim owns its rows. Must exceed the time to publish one batch. Default 60 s. */
  leaseMs?: number;
  /** Attempts before a retryable failure becomes a dead letter. Default 20. */
  maxAttempts?: number;
  backoff?: Partial<BackoffPolicy>;
  /** `aggregate`: an event is never published before an earlier one of its aggregate. Default `none`. */
  ordering?: 'none' | 'aggregate';
  /**
   * Ordered mode: what a dead letter does to its aggregate. `block` (default)
   * holds the aggregate's later events until an operator redrives or discards
   * the dead letter; `skip` lets them pass it (it can then only be published
   * out of order).
   */
  deadLetterPolicy?: 'block' | 'skip';
  /**
   * Ordered mode: most events of one aggregate per claim: its head and the
   * unfinished events right behind it, published in order (an SQS FIFO queue
   * gets up to 10 of them per call, calls in sequence; EventBridge one per
   * call). 1 claims the head alone: one message per group per call, so order
   * holds whatever SQS does with a partial batch failure (docs/ordering.md).
   * Default 50.
   */
  maxPerAggregate?: number;
  /** Stop claiming when less than this much invocation time is left. Default 10 s. */
  safetyMarginMs?: number;
  /**
   * Longest wait between polls that find nothing (cut short by NOTIFY when
   * listening). Waits adapt: after a claim that found work the next empty
   * poll waits `idleWaitMinMs`, and each further empty poll doubles the wait
   * up to this. Default 200 ms.
   */
  idleWaitMs?: number;
  /** Shortest wait between polls, right after work was found. Default 10 ms. */
  idleWaitMinMs?: number;
  /**
   * Scale to zero: a run returns once no worker has found anything to claim
   * for this long, instead of polling until its time budget is spent. An
   * idle outbox then costs one short invocation per schedule tick; under
   * load the run drains to its budget as before. `null` (the default): no
   * tail, the run polls to its budget (always on). The Lambda relay sets it
   * from `OUTBOX_IDLE_TAIL_MS`.
   */
  idleTailMs?: number | null;
  /**
   * Scale out: at most this many relay runs at once, each holding a slot of
   * `outbox_relay_slots`; a run that finds every slot held returns at once
   * (`stoppedBecause: 'busy'`), one that finds a backlog starts runs for the
   * free slots through `RelayDeps.startRelays`. Null (default): no slots, no
   * scale-out. The Lambda relay sets it from `OUTBOX_MAX_RELAYS`.
   */
  maxRelays?: number | null;
  /** Ready events at which a run starts more relays (with `maxRelays`). Default 1,000. */
  scaleOutBacklog?: number;
  /**
   * Lag at which a run starts more relays (with `maxRelays`): the age of the
   * oldest event its last claim took, so rows nobody may claim (behind a
   * dead letter or a held head) never count. Default 10 s.
   */
  scaleOutAgeMs?: number;
  /**
   * Measured scale out (with `maxRelays`): when the relays a run started did
   * not raise the rate by two measures in a row (they wait on something they
   * share), the slots they took and the free ones are closed for this long;
   * no relay is started for them meanwhile, then the next backlog measures
   * again. Default 5 minutes.
   */
  scaleOutParkMs?: number;
  /**
   * With `maxRelays`: a run renews its slot every half second (every quarter of
   * this, if that is shorter); a slot not renewed for this long is free, so a relay killed mid-run (out of
   * memory, a crash of its runtime) stops counting as running within it.
   * Default 20 s.
   */
  slotAliveMs?: number;
  /**
   * Failures of the environment (outage, throttling, access denied, timeouts)
   * do not spend attempts; an event that has kept failing that way for
   * longer than this, counted from its first such failure since it was last
   * asked to go out (enqueue, redrive, replay), is dead-lettered. Default 24 h.
   */
  maxPendingAgeMs?: number;
  /**
   * What becomes of a published row. `keep` (default): it is marked published
   * and stays until cleanup deletes it after the retention; replay and
   * audits can use it. `delete`: the outcome deletes it, which costs the
   * database a fifth of what marking it does and leaves cleanup no published
   * rows to delete; published events can then not be replayed from the
   * table, and an event id given by a producer can be written again once its
   * row is gone.
   * Retried and dead-lettered rows stay in both modes.
   */
  publishedRows?: 'keep' | 'delete';
  /**
   * Events retried because a target is unavailable are not logged one by
   * one (an outage would write a line per waiting event per claim): the
   * relay logs a summary of them per target at most this often, and at the
   * end of each run. Target state changes are logged when they happen (the
   * publisher's `onTargetChange`). Default 60 s.
   */
  waitingSummaryMs?: number;
  /**
   * Whether the relay's log lines carry an event's `aggregate_id`. Ids can be
   * personal data (an e-mail address); the event id and type always travel.
   * Default false (`OUTBOX_LOG_AGGREGATE_ID=true`).
   */
  logAggregateId?: boolean;
  /**
   * The schema the outbox tables live in (`migrate({ schema })`,
   * `OUTBOX_SCHEMA`). Default: unqualified names, found through the
   * connection's `search_path`.
   */
  schema?: string | undefined;
}

export type ResolvedRelayOptions = Required<Omit<RelayOptions, 'backoff' | 'schema'>> & {
  backoff: BackoffPolicy;
  schema: string | undefined;
};

export const RELAY_DEFAULTS: ResolvedRelayOptions = {
  batchSize: 100,
  maxClaimBytes: 32 * 1024 * 1024,
  workers: 2,
  leaseMs: 60_000,
  maxAttempts: 20,
  backoff: { baseMs: 1_000, factor: 2, maxMs: 300_000 },
  ordering: 'none',
  deadLetterPolicy: 'block',
  maxPerAggregate: 50,
  safetyMarginMs: 10_000,
  idleWaitMs: 200,
  idleWaitMinMs: 10,
  idleTailMs: null,
  maxRelays: null,
  scaleOutBacklog: 1_000,
  scaleOutAgeMs: 10_000,
  scaleOutParkMs: 300_000,
  slotAliveMs: 20_000,
  maxPendingAgeMs: 86_400_000,
  publishedRows: 'keep',
  waitingSummaryMs: 60_000,
  logAggregateId: false,
  schema: undefined,
};

/** Fills in defaults; the one place where they are decided. */
export function resolveRelayOptions(options: RelayOptions = {}): ResolvedRelayOptions {
  const defined = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
  const backoff = Object.fromEntries(
    Object.entries(options.backoff ?? {}).filter(([, v]) => v !== undefined),
  );
  const resolved = { ...RELAY_DEFAULTS, ...defined, backoff: { ...RELAY_DEFAULTS.backoff, ...backoff } };
  const invalid = (field: string, expected: string, got: unknown) =>
    new ConfigError(field, `expected ${expected} (got ${String(got)})`);
  if (resolved.publishedRows !== 'keep' && resolved.publishedRows !== 'delete') {
    throw invalid('publishedRows', '"keep" or "delete"', JSON.stringify(resolved.publishedRows));
  }
  if (!(Number.isSafeInteger(resolved.maxClaimBytes) && resolved.maxClaimBytes > 0)) {
    throw invalid('maxClaimBytes', 'a whole number of bytes > 0', resolved.maxClaimBytes);
  }
  const tail = resolved.idleTailMs;
  if (tail !== null && !(Number.isFinite(tail) && tail >= 0)) {
    throw invalid('idleTailMs', 'milliseconds >= 0, or null for no tail', tail);
  }
  const maxRelays = resolved.maxRelays;
  if (maxRelays !== null && !(Number.isInteger(maxRelays) && maxRelays >= 1)) {
    throw invalid('maxRelays', 'a whole number >= 1, or null for no slots', maxRelays);
  }
  for (const field of ['scaleOutBacklog', 'scaleOutAgeMs', 'scaleOutParkMs', 'slotAliveMs'] as const) {
    const value = resolved[field];
    if (!(Number.isInteger(value) && value >= 1)) throw invalid(field, 'a whole number >= 1', value);
  }
  resolved.schema = validateSchemaName(resolved.schema);
  return resolved;
}
