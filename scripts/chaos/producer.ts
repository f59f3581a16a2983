import { randomUUID } from 'node:crypto';
import type { Pool } from 'pg';
import { withTransaction } from '../../lib/db/transaction.js';
import { TransactionRolledBackError } from '../../lib/errors.js';
import { enqueueEvents } from '../../lib/outbox/enqueue.js';
import type { NewOutboxEvent } from '../../lib/outbox/types.js';
import { CRASH_MARKER } from './poison-crash.js';
import type { Rng } from './rng.js';

/** What the producer knows about an event it wrote. */
export interface ProducedEvent {
  aggregateId: string;
  /** Per-aggregate position in commit order (gaps where transactions rolled back). */
  n: number;
  eventType: string;
  /** Written by one half of an interleaved pair (see {@link Producer}). */
  interleaved: boolean;
  /** Bytes of a large payload (written with `largePayloads: true`); absent for the usual few hundred. */
  largeBytes?: number;
}

/**
 * Poison events: `no_route`, an event type no route matches (the relay
 * dead-letters it at once, as NoRoute); `crash`, a routed event whose
 * payload makes the chaos relay process kill itself while publishing its
 * batch (poison-crash.ts). Each is alone on an aggregate of its own, so
 * that in ordered mode its dead letter holds back nothing but itself.
 */
export type PoisonKind = 'no_route' | 'crash';
export const POISON_EVENT_TYPE = 'chaos.unroutable';

/** Event types the suite writes; `order.shipped` also goes to the EventBridge bus. */
export const EVENT_TYPES = ['order.created', 'order.paid', 'order.shipped', 'order.noted'] as const;
export const BUS_EVENT_TYPE = 'order.shipped';

export interface ProducerOptions {
  pool: Pool;
  rng: Rng;
  /** Stop once this many events committed. */
  events: number;
  /** Spread them over about this long. */
  durationMs: number;
  aggregates: number;
  /** Transactions in flight at once. */
  concurrency: number;
  /** Share of transactions rolled back by throwing after the events were written. */
  throwRate: number;
  /** Share rolled back by a failing statement whose error the code swallows. */
  swallowRate: number;
  /**
   * Share of "interleaved pairs" (ordered mode): T1 writes events of
   * aggregate X; while it is open, T2 writes events of X numbered *before*
   * T1's and commits; then T1 commits. Insert order is T1, T2; commit order
   * is T2, T1, and only a relay that publishes in commit order passes. If the
   * library serializes writers of an aggregate, T2 waits for T1's lock,
   * gives up after 1 s (lock_timeout) and rolls back.
   */
  interleaveRate: number;
  /** Share of transactions that write one `no_route` poison event instead. */
  poisonRate?: number;
  /** Fractions of `events` at which one `crash` poison event is written (e.g. [0.05, 0.5]). */
  crashAt?: number[];
  /** Share of events with a large payload, of `largeBytes` bytes (drawn uniformly). */
  largeRate?: number;
  largeBytes?: [number, number];
}

/** The producer's own ledger table: the business row of each transaction. */
export const LEDGER_DDL = `
  CREATE TABLE IF NOT EXISTS chaos_ledger (
    tx_id uuid PRIMARY KEY,
    aggregate_id text NOT NULL,
    events int NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
  )`;

class InjectedRollback extends Error {
  override name = 'InjectedRollback';
}

/**
 * Writes events in transactions of 1–5 with business rows, some rolled back
 * on purpose, and remembers which events committed. Writers of one aggregate
 * take turns inside this process, so the per-aggregate counter in each
 * payload is the aggregate's commit order (except in interleaved pairs, where
 * the producer decides the commit order itself).
 */
export class Producer {
  readonly committed = new Map<string, ProducedEvent>();
  readonly rolledBack = new Set<string>();
  /** Events whose transaction's outcome is unknown (COMMIT failed); settled later from the table. */
  readonly uncertain = new Map<string, ProducedEvent>();
  /** The transaction (its chaos_ledger row) of each uncertain event. */
  readonly uncertainTx = new Map<string, string>();
  /** Poison events that committed (or whose outcome is uncertain: settled like the others). */
  readonly poison = new Map<string, PoisonKind>();
  /** Poison events whose commit's outcome is unknown. */
  readonly poisonUncertain = new Map<string, PoisonKind>();
  readonly counts = {
    transactions: 0,
    committed_transactions: 0,
    thrown: 0,
    swallowed: 0,
    interleaved_pairs: 0,
    /** Interleaved pairs whose second writer waited for the first (writers serialized). */
    interleave_blocked: 0,
    /** A swallowed failing statement that withTransaction reported as committed (a library bug). */
    swallowed_reported_committed: 0,
    errors: 0,
    poison_no_route: 0,
    poison_crash: 0,
    large_payloads: 0,
    large_payload_bytes: 0,
  };
  readonly errorSamples: string[] = [];
  /** Why the second writer of an interleaved pair gave up (expected: a lock timeout). */
  readonly blockedSamples: string[] = [];
  private readonly counters = new Map<string, number>();
  private readonly turns = new Map<string, Promise<void>>();

  constructor(private readonly options: ProducerOptions) {}

  async run(signal: AbortSignal): Promise<void> {
    const started = Date.now();
    const perMs = this.options.events / this.options.durationMs;
    const crashAt = [...(this.options.crashAt ?? [])].sort((a, b) => a - b);
    const worker = async (index: number) => {
      const rng = this.options.rng.fork(`producer-${index}`);
      while (!signal.aborted && this.committed.size < this.options.events) {
        if (crashAt.length > 0 && this.committed.size >= (crashAt[0] as number) * this.options.events) {
          crashAt.shift();
          // In one transaction with events of a busy aggregate, so that the
          // relay claims it in a batch with neighbours.
          const aggregateId = `agg-${rng.int(1, this.options.aggregates)}`;
          await this.inTurn(aggregateId, () =>
            this.transaction(rng, aggregateId, this.poisonEvent('crash')),
          ).catch((error) => this.noteError(error));
          continue;
        }
        if (rng.chance(this.options.poisonRate ?? 0)) {
          await this.poisonTransaction('no_route').catch((error) => this.noteError(error));
          continue;
        }
        const due = started + this.committed.size / perMs;
        if (due > Date.now()) await sleep(Math.min(due - Date.now(), 250));
        if (due > Date.now() + 5) continue;
        const aggregateId = `agg-${rng.int(1, this.options.aggregates)}`;
        await this.inTurn(aggregateId, () => this.transaction(rng, aggregateId)).catch((error) =>
          this.noteError(error),
        );
      }
    };
    await Promise.all(Array.from({ length: this.options.concurrency }, (_, i) => worker(i)));
  }

  private noteError(error: unknown) {
    this.counts.errors++;
    if (this.errorSamples.length < 5) this.errorSamples.push(String(error));
  }

  /** A poison event on an aggregate of its own. */
  private poisonEvent(kind: PoisonKind): NewOutboxEvent & { id: string; poison: PoisonKind } {
    const id = randomUUID();
    const aggregateId = `poison-${kind}-${id.slice(0, 8)}`;
    const event: NewOutboxEvent & { id: string } =
      kind === 'no_route'
        ? { id, aggregateType: 'order', aggregateId, eventType: POISON_EVENT_TYPE, payload: { poison: kind } }
        : {
            id,
            aggregateType: 'order',
            aggregateId,
            eventType: 'order.noted',
            payload: { [CRASH_MARKER]: true },
            headers: { 'x-chaos-n': '1' },
          };
    return { ...event, poison: kind };
  }

  /** One poison event, alone in its transaction. */
  private async poisonTransaction(kind: PoisonKind): Promise<void> {
    const { poison: _, ...event } = this.poisonEvent(kind);
    try {
      await withTransaction(this.options.pool, (client) => enqueueEvents(client, [event]));
    } catch (error) {
      this.poisonUncertain.set(event.id, kind);
      throw error;
    }
    this.notePoison(event.id, kind);
  }

  private notePoison(id: string, kind: PoisonKind) {
    this.poison.set(id, kind);
    this.counts[kind === 'crash' ? 'poison_crash' : 'poison_no_route']++;
  }

  /** Runs `fn` once no other writer of the aggregate in this process is running. */
  private async inTurn(aggregateId: string, fn: () => Promise<void>): Promise<void> {
    const previous = this.turns.get(aggregateId) ?? Promise.resolve();
    const mine = previous.then(fn, fn);
    const settled = mine.catch(() => {});
    this.turns.set(aggregateId, settled);
    try {
      await mine;
    } finally {
      if (this.turns.get(aggregateId) === settled) this.turns.delete(aggregateId);
    }
  }

  private plan(rng: Rng, aggregateId: string, count: number, interleaved = false) {
    const base = this.counters.get(aggregateId) ?? 0;
    this.counters.set(aggregateId, base + count);
    return Array.from({ length: count }, (_, i) => {
      const meta: ProducedEvent = {
        aggregateId,
        n: base + i + 1,
        eventType: rng.pick(EVENT_TYPES),
        interleaved,
      };
      const large = rng.chance(this.options.largeRate ?? 0);
      if (large) meta.largeBytes = rng.int(...(this.options.largeBytes ?? [300 * 1024, 2 * 1024 * 1024]));
      const event: NewOutboxEvent & { id: string } = {
        id: randomUUID(),
        aggregateType: 'order',
        aggregateId,
        eventType: meta.eventType,
        payload: meta.largeBytes
          ? { aggregateId, n: meta.n, interleaved, size: meta.largeBytes, blob: 'x'.repeat(meta.largeBytes) }
          : { aggregateId, n: meta.n, interleaved, note: 'x'.repeat(rng.int(0, 400)) },
        headers: { 'x-chaos-n': String(meta.n) },
      };
      return { meta, event };
    });
  }

  /** `poison`: written in the middle of the transaction's events, which then commits. */
  private async transaction(
    rng: Rng,
    aggregateId: string,
    poison?: NewOutboxEvent & { id: string; poison: PoisonKind },
  ): Promise<void> {
    const roll = rng.next();
    const { throwRate, swallowRate, interleaveRate } = this.options;
    if (!poison && roll < interleaveRate) return this.interleavedPair(rng, aggregateId);
    const kind = poison
      ? 'commit'
      : roll < interleaveRate + throwRate
        ? 'throw'
        : roll < interleaveRate + throwRate + swallowRate
          ? 'swallow'
          : 'commit';
    const planned = this.plan(rng, aggregateId, poison ? 6 : rng.int(1, 5));
    const events: NewOutboxEvent[] = planned.map((p) => p.event);
    if (poison) {
      const { poison: _, ...event } = poison;
      events.splice(3, 0, event);
    }
    const txId = randomUUID();
    this.counts.transactions++;
    try {
      await withTransaction(this.options.pool, async (client) => {
        await client.query('INSERT INTO chaos_ledger (tx_id, aggregate_id, events) VALUES ($1, $2, $3)', [
          txId,
          aggregateId,
          planned.length,
        ]);
        await enqueueEvents(client, events, largeOptions(planned));
        if (kind === 'throw') throw new InjectedRollback('rolled back on purpose');
        if (kind === 'swallow') {
          // The same business row again: a unique violation, caught and ignored.
          await client
            .query('INSERT INTO chaos_ledger (tx_id, aggregate_id, events) VALUES ($1, $2, $3)', [
              txId,
              aggregateId,
              0,
            ])
            .catch(() => {});
        }
      });
    } catch (error) {
      if (error instanceof InjectedRollback && kind === 'throw') {
        this.counts.thrown++;
        for (const p of planned) this.rolledBack.add(p.event.id);
        return;
      }
      if (error instanceof TransactionRolledBackError && kind === 'swallow') {
        this.counts.swallowed++;
        for (const p of planned) this.rolledBack.add(p.event.id);
        return;
      }
      // Outcome unknown (e.g. the connection failed at COMMIT): the tables decide later.
      if (poison) this.poisonUncertain.set(poison.id, poison.poison);
      for (const p of planned) {
        this.uncertain.set(p.event.id, p.meta);
        this.uncertainTx.set(p.event.id, txId);
      }
      throw error;
    }
    if (kind === 'swallow') {
      // PostgreSQL rolled it back whatever withTransaction said.
      this.counts.swallowed_reported_committed++;
      for (const p of planned) this.rolledBack.add(p.event.id);
      return;
    }
    this.counts.committed_transactions++;
    for (const p of planned) this.commit(p.meta, p.event.id);
    if (poison) this.notePoison(poison.id, poison.poison);
  }

  private commit(meta: ProducedEvent, id: string) {
    this.committed.set(id, meta);
    if (meta.largeBytes) {
      this.counts.large_payloads++;
      this.counts.large_payload_bytes += meta.largeBytes;
    }
  }

  private async interleavedPair(rng: Rng, aggregateId: string): Promise<void> {
    // Numbered first, committed first: the second writer's events.
    const second = this.plan(rng, aggregateId, rng.int(1, 2), true);
    const first = this.plan(rng, aggregateId, rng.int(1, 2), true);
    this.counts.interleaved_pairs++;
    this.counts.transactions += 2;
    const firstTxId = randomUUID();
    try {
      await withTransaction(this.options.pool, async (c1) => {
        await c1.query('INSERT INTO chaos_ledger (tx_id, aggregate_id, events) VALUES ($1, $2, $3)', [
          firstTxId,
          aggregateId,
          first.length,
        ]);
        await enqueueEvents(
          c1,
          first.map((p) => p.event),
          largeOptions(first),
        );
        try {
          await withTransaction(this.options.pool, async (c2) => {
            await c2.query("SET LOCAL lock_timeout = '1s'");
            await enqueueEvents(
              c2,
              second.map((p) => p.event),
              largeOptions(second),
            );
          });
          this.counts.committed_transactions++;
          for (const p of second) this.commit(p.meta, p.event.id);
        } catch (error) {
          this.counts.interleave_blocked++;
          if (this.blockedSamples.length < 3) this.blockedSamples.push(String(error));
          for (const p of second) this.rolledBack.add(p.event.id);
        }
      });
    } catch (error) {
      for (const p of first) {
        this.uncertain.set(p.event.id, p.meta);
        this.uncertainTx.set(p.event.id, firstTxId);
      }
      throw error;
    }
    this.counts.committed_transactions++;
    for (const p of first) this.commit(p.meta, p.event.id);
  }
}

/** A transaction with a large payload is written with `largePayloads: true` (the relay stores it in S3). */
const largeOptions = (planned: ReadonlyArray<{ meta: ProducedEvent }>) =>
  planned.some((p) => p.meta.largeBytes) ? { largePayloads: true } : {};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
