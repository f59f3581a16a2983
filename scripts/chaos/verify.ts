import type { Pool } from 'pg';
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
  /** Messages received beyond the first of their event, all destinations. */
  duplicates: number;
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
    order_violations: 0,
    order_violations_interleaved: 0,
    samples: { lost: [], order: [] },
  };
  const firstSeen = (messages: readonly Received[]) => {
    const seen = new Set<string>();
    const firsts: Received[] = [];
    for (const m of messages) {
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
