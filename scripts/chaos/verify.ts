import type { Pool } from 'pg';
import type { ReplayRecord } from './faults.js';
import { BUS_EVENT_TYPE, type ProducedEvent } from './producer.js';
import type { Received } from './receiver.js';

/** What the receivers saw, checked against what the producer committed. */
export interface Verdict {
  /** Committed events missing from at least one destination they were routed to. */
  lost: number;
  lost_by_destination: { queue: number; bus: number };
  /** Rolled-back events received anywhere. */
  rolled_back_seen: number;
  /** Received events the producer never wrote. */
  unknown_seen: number;
  /**
   * Messages received beyond the first of their event, all destinations: a
   * message the relay sent again (a redelivery of one message, e.g. after a
   * consumer failed or was killed, is not counted; nor is a replay's message).
   */
  duplicates: number;
  /** Redeliveries of one message (same message id), relay queue. */
  redeliveries: number;
  /** Events of an aggregate received after one committed later (first receipt of each, relay queue). */
  order_violations: number;
  /** Of those, events written by an interleaved pair of transactions. */
  order_violations_interleaved: number;
  samples: { lost: string[]; order: string[] };
}

export function verifyReceived(
  committed: ReadonlyMap<string, ProducedEvent>,
  rolledBack: ReadonlySet<string>,
  queue: readonly Received[],
  busQueue: readonly Received[],
  checkOrder: boolean,
): Verdict {
  const verdict: Verdict = {
    lost: 0,
    lost_by_destination: { queue: 0, bus: 0 },
    rolled_back_seen: 0,
    unknown_seen: 0,
    duplicates: 0,
    redeliveries: 0,
    order_violations: 0,
    order_violations_interleaved: 0,
    samples: { lost: [], order: [] },
  };
  const firstSeen = (messages: readonly Received[]) => {
    const seen = new Set<string>();
    const messageIds = new Set<string>();
    const firsts: Received[] = [];
    for (const m of messages) {
      if (m.messageId !== undefined) {
        if (messageIds.has(m.messageId)) {
          verdict.redeliveries++;
          continue;
        }
        messageIds.add(m.messageId);
      }
      if (m.replayId !== undefined && committed.has(m.eventId)) continue;
      if (seen.has(m.eventId)) verdict.duplicates++;
      else {
        seen.add(m.eventId);
        firsts.push(m);
      }
    }
    return { seen, firsts };
  };
  const q = firstSeen(queue);
  const b = firstSeen(busQueue);
  for (const id of new Set([...q.seen, ...b.seen])) {
    if (rolledBack.has(id)) verdict.rolled_back_seen++;
    else if (!committed.has(id)) verdict.unknown_seen++;
  }
  for (const [id, event] of committed) {
    const missingQueue = !q.seen.has(id);
    const missingBus = event.eventType === BUS_EVENT_TYPE && !b.seen.has(id);
    if (missingQueue) verdict.lost_by_destination.queue++;
    if (missingBus) verdict.lost_by_destination.bus++;
    if (missingQueue || missingBus) {
      verdict.lost++;
      if (verdict.samples.lost.length < 5) {
        verdict.samples.lost.push(
          `${id} (${event.eventType}, missing from ${missingQueue ? 'queue' : 'bus'})`,
        );
      }
    }
  }
  if (checkOrder) {
    const highest = new Map<string, number>();
    for (const m of q.firsts) {
      const event = committed.get(m.eventId);
      if (!event) continue;
      const top = highest.get(event.aggregateId) ?? 0;
      if (event.n < top) {
        verdict.order_violations++;
        if (event.interleaved) verdict.order_violations_interleaved++;
        if (verdict.samples.order.length < 5) {
          verdict.samples.order.push(
            `${event.aggregateId}: #${event.n}${event.interleaved ? ' (interleaved)' : ''} received after #${top}`,
          );
        }
      } else highest.set(event.aggregateId, event.n);
    }
  }
  return verdict;
}

/** What the consumers' handlers committed (`chaos_handled`), checked against the producer and the replays. */
export interface ConsumerVerdict {
  /** Committed events that some consumer never handled (union over the consumers). */
  consumer_lost: number;
  consumer_lost_by_consumer: Record<string, number>;
  /** Events whose handler effects committed more than once for one consumer (per replay, for `handle`). */
  handled_twice: number;
  /** Rolled-back, poison or unknown events handled. */
  wrong_handled: number;
  /** A handler saw a payload other than the committed one (counter, or a large payload's size). */
  payload_mismatch: number;
  /** Replayed (event, replay) pairs the `replays: 'handle'` consumer did not handle. */
  replays_not_handled: number;
  /** Replay messages the `replays: 'skip'` consumer handled (first deliveries through a replay). */
  replays_handled_by_skip: number;
  /** Ordered mode: see {@link verifyConsumers}. */
  consumer_order_violations: number | null;
  large_payloads_handled: number;
  rows: number;
  samples: { consumer_lost: string[]; handled_twice: string[]; consumer_order: string[] };
}

interface HandledRow {
  consumer: string;
  event_id: string;
  aggregate_id: string;
  n: number;
  replay_id: string | null;
  sent_ms: number | null;
  payload_ok: boolean;
}

/**
 * Checks the consumers' table. Per consumer: every committed event handled
 * (`consumer_lost`), none handled twice (`handled_twice`: two rows of one
 * event, or for `replays: 'handle'` two rows of one event and replay id),
 * nothing else handled, the payload as committed. With `handle`, each event
 * of each replay is handled once more.
 *
 * Order (ordered mode), per consumer and aggregate, in the order the
 * handlers' rows were written (`handled_seq`; a message group is handled one
 * batch at a time):
 * - first handlings (no replay id) come in commit order: a lower counter
 *   after a higher one is a violation;
 * - a replay of the aggregate (`handle` only) is one contiguous block of its
 *   events in their original order; a replay takes its original place, so
 *   what was published before the replay comes before the block (a first
 *   handling before it whose message was sent after the replay returned is
 *   a violation: a pending event overtook the replayed ones) and what was
 *   published after comes after it (a first handling after the block whose
 *   message was sent before the replay started is a violation).
 */
export async function verifyConsumers(
  pool: Pool,
  consumers: readonly string[],
  committed: ReadonlyMap<string, ProducedEvent>,
  replays: readonly ReplayRecord[],
  handleConsumer: string,
  checkOrder: boolean,
): Promise<ConsumerVerdict> {
  const { rows } = await pool.query<HandledRow>(`
    SELECT consumer, event_id::text, aggregate_id, n, replay_id::text,
           (extract(epoch FROM sent_at) * 1000)::float8 AS sent_ms, payload_ok
    FROM chaos_handled ORDER BY handled_seq`);
  const v: ConsumerVerdict = {
    consumer_lost: 0,
    consumer_lost_by_consumer: Object.fromEntries(consumers.map((c) => [c, 0])),
    handled_twice: 0,
    wrong_handled: 0,
    payload_mismatch: 0,
    replays_not_handled: 0,
    replays_handled_by_skip: 0,
    consumer_order_violations: checkOrder ? 0 : null,
    large_payloads_handled: 0,
    rows: rows.length,
    samples: { consumer_lost: [], handled_twice: [], consumer_order: [] },
  };
  const sample = (list: string[], line: string) => {
    if (list.length < 5) list.push(line);
  };
  const byKey = new Map<string, HandledRow[]>();
  for (const r of rows) {
    const key = `${r.consumer}|${r.event_id}`;
    const list = byKey.get(key);
    if (list) list.push(r);
    else byKey.set(key, [r]);
    if (!r.payload_ok) v.payload_mismatch++;
  }
  const wrong = new Set<string>();
  for (const [key, list] of byKey) {
    const [consumer, eventId] = key.split('|') as [string, string];
    const event = committed.get(eventId);
    if (!event) {
      wrong.add(eventId);
      continue;
    }
    if (event.largeBytes) v.large_payloads_handled++;
    const perReplay = new Map<string, number>();
    for (const r of list) perReplay.set(r.replay_id ?? '', (perReplay.get(r.replay_id ?? '') ?? 0) + 1);
    const twice = consumer === handleConsumer ? [...perReplay.values()].some((c) => c > 1) : list.length > 1;
    if (twice) {
      v.handled_twice++;
      sample(v.samples.handled_twice, `${consumer}: ${eventId} handled ${list.length} times`);
    }
    if (consumer !== handleConsumer && list.some((r) => r.replay_id !== null)) v.replays_handled_by_skip++;
  }
  v.wrong_handled = wrong.size;
  const lostAnywhere = new Set<string>();
  for (const consumer of consumers) {
    for (const [id, event] of committed) {
      if (byKey.has(`${consumer}|${id}`)) continue;
      v.consumer_lost_by_consumer[consumer] = (v.consumer_lost_by_consumer[consumer] ?? 0) + 1;
      if (!lostAnywhere.has(id)) {
        lostAnywhere.add(id);
        sample(
          v.samples.consumer_lost,
          `${id} (${event.aggregateId} #${event.n}) never handled by ${consumer}`,
        );
      }
    }
  }
  v.consumer_lost = lostAnywhere.size;
  for (const replay of replays) {
    for (const id of replay.ids) {
      const list = byKey.get(`${handleConsumer}|${id}`) ?? [];
      if (!list.some((r) => r.replay_id === replay.replayId)) v.replays_not_handled++;
    }
  }

  if (checkOrder && v.consumer_order_violations !== null) {
    let violations = 0;
    const replayOf = new Map(replays.map((r) => [r.replayId, r]));
    const byAggregate = new Map<string, HandledRow[]>();
    for (const r of rows) {
      if (!committed.has(r.event_id)) continue;
      const key = `${r.consumer}|${r.aggregate_id}`;
      const list = byAggregate.get(key);
      if (list) list.push(r);
      else byAggregate.set(key, [r]);
    }
    for (const [key, list] of byAggregate) {
      const consumer = key.split('|')[0] as string;
      let top = 0;
      for (const r of list) {
        if (r.replay_id !== null && consumer === handleConsumer) continue;
        if (r.n < top) {
          violations++;
          sample(v.samples.consumer_order, `${key}: #${r.n} handled after #${top}`);
        } else top = r.n;
      }
      if (consumer !== handleConsumer) continue;
      for (const replayId of new Set(list.flatMap((r) => (r.replay_id ? [r.replay_id] : [])))) {
        const replay = replayOf.get(replayId);
        const positions = list.flatMap((r, i) => (r.replay_id === replayId ? [i] : []));
        const first = positions[0] as number;
        const last = positions[positions.length - 1] as number;
        const block = list.slice(first, last + 1);
        if (block.some((r) => r.replay_id !== replayId)) {
          violations++;
          sample(v.samples.consumer_order, `${key}: replay ${replayId} interrupted by other events`);
        }
        if (block.some((r, i) => i > 0 && r.n <= (block[i - 1] as HandledRow).n)) {
          violations++;
          sample(v.samples.consumer_order, `${key}: replay ${replayId} out of its original order`);
        }
        if (!replay) continue;
        for (const r of list.slice(0, first)) {
          if (r.replay_id === null && r.sent_ms !== null && r.sent_ms > replay.endedMs) {
            violations++;
            sample(
              v.samples.consumer_order,
              `${key}: #${r.n}, sent after replay ${replayId} returned, handled before its events`,
            );
          }
        }
        for (const r of list.slice(last + 1)) {
          if (r.replay_id === null && r.sent_ms !== null && r.sent_ms < replay.startedMs) {
            violations++;
            sample(
              v.samples.consumer_order,
              `${key}: #${r.n}, sent before replay ${replayId} started, handled after its events`,
            );
          }
        }
      }
    }
    v.consumer_order_violations = violations;
  }
  return v;
}

/** Poison and dead letters at the end of a run. */
export interface DeadLetterVerdict {
  /** Poison events that are not dead letters at the end. */
  poison_not_dead_lettered: number;
  /** Events other than the poison ones that were dead-lettered at some point (now, or redriven since). */
  non_poison_dead_letters: number;
  /** Of those, dead letters at the end. */
  non_poison_dead_letters_left: number;
  poison_dead_letters: number;
  /** Why the poison events were dead-lettered (distinct last_error, shortened). */
  poison_reasons: string[];
  samples: string[];
}

export async function verifyDeadLetters(
  pool: Pool,
  poison: ReadonlyMap<string, string>,
): Promise<DeadLetterVerdict> {
  const { rows } = await pool.query<{ id: string; dead: boolean; last_error: string | null }>(`
    SELECT id::text, dead_lettered_at IS NOT NULL AS dead, last_error
    FROM outbox_events WHERE dead_lettered_at IS NOT NULL OR redrive_count > 0`);
  const v: DeadLetterVerdict = {
    poison_not_dead_lettered: 0,
    non_poison_dead_letters: 0,
    non_poison_dead_letters_left: 0,
    poison_dead_letters: 0,
    poison_reasons: [],
    samples: [],
  };
  const deadPoison = new Set<string>();
  const reasons = new Set<string>();
  for (const r of rows) {
    if (poison.has(r.id)) {
      if (r.dead) {
        deadPoison.add(r.id);
        reasons.add(`${poison.get(r.id)}: ${(r.last_error ?? '').slice(0, 120)}`);
      }
      continue;
    }
    v.non_poison_dead_letters++;
    if (r.dead) v.non_poison_dead_letters_left++;
    if (v.samples.length < 5) v.samples.push(`${r.id}: ${r.last_error ?? ''}`.slice(0, 300));
  }
  v.poison_dead_letters = deadPoison.size;
  v.poison_not_dead_lettered = poison.size - deadPoison.size;
  v.poison_reasons = [...reasons].slice(0, 6);
  return v;
}

/** The outbox table at the end of a run. */
export interface TableState {
  /** Not published and not dead-lettered. */
  unfinished: number;
  /** Under a lease that has not expired. */
  leased: number;
  /** Dead letters now. */
  dead_letters_now: number;
  /** Events dead-lettered at least once (now, or redriven since). */
  ever_dead_lettered: number;
  processed: number;
  rows: number;
}

export async function tableState(pool: Pool): Promise<TableState> {
  const { rows } = await pool.query(`
    SELECT
      count(*) FILTER (WHERE processed_at IS NULL AND dead_lettered_at IS NULL)::int AS unfinished,
      count(*) FILTER (WHERE processed_at IS NULL AND locked_until > now())::int AS leased,
      count(*) FILTER (WHERE dead_lettered_at IS NOT NULL)::int AS dead_now,
      count(*) FILTER (WHERE dead_lettered_at IS NOT NULL OR redrive_count > 0)::int AS ever_dead,
      count(*) FILTER (WHERE processed_at IS NOT NULL)::int AS processed,
      count(*)::int AS rows
    FROM outbox_events`);
  const r = rows[0];
  return {
    unfinished: r.unfinished,
    leased: r.leased,
    dead_letters_now: r.dead_now,
    ever_dead_lettered: r.ever_dead,
    processed: r.processed,
    rows: r.rows,
  };
}

/** Which of `ids` (uuids) `select` finds: it takes them as $1 and returns one `id` column. */
async function found(pool: Pool, select: string, ids: readonly string[]): Promise<Set<string>> {
  const present = new Set<string>();
  for (let i = 0; i < ids.length; i += 5000) {
    const { rows } = await pool.query<{ id: string }>(select, [ids.slice(i, i + 5000)]);
    for (const r of rows) present.add(r.id);
  }
  return present;
}

/** Which of `txIds` committed: their business row (chaos_ledger) exists. */
export const committedTransactions = (pool: Pool, txIds: readonly string[]) =>
  found(pool, 'SELECT tx_id::text AS id FROM chaos_ledger WHERE tx_id = ANY($1::uuid[])', txIds);

/** Which of `ids` are rows of the outbox. */
export const storedIds = (pool: Pool, ids: readonly string[]) =>
  found(pool, 'SELECT id::text FROM outbox_events WHERE id = ANY($1::uuid[])', ids);

/** Counts, per pattern, the relay log lines that mention it (evidence for the report). */
export function countLogLines(text: string, patterns: Record<string, RegExp>): Record<string, number> {
  const counts = Object.fromEntries(Object.keys(patterns).map((k) => [k, 0]));
  for (const line of text.split('\n')) {
    for (const [name, pattern] of Object.entries(patterns)) if (pattern.test(line)) counts[name]!++;
  }
  return counts;
}
