import type { Queryable } from '../db/queryable.js';
import { perSchema } from '../db/schema.js';

// Relay slots (migrations/1764900700000_outbox-relay-slots.sql): at most
// maxRelays runs hold one at a time. Taking a slot inserts it, or takes over
// a row whose holder's time ran out; two relays that pick the same free slot
// at once conflict, and the one that waited on the other's insert finds it
// held and tries the next.
const sql = perSchema((t) => ({
  ACQUIRE: `
    INSERT INTO ${t.relaySlots} AS s (slot, holder, held_until)
    SELECT n, $1::uuid, now() + $3::float8 * interval '1 millisecond'
    FROM generate_series(0, $2::int - 1) n
    WHERE NOT EXISTS (SELECT 1 FROM ${t.relaySlots} h WHERE h.slot = n AND h.held_until > now())
    ORDER BY n
    LIMIT 1
    ON CONFLICT (slot) DO UPDATE SET holder = EXCLUDED.holder, held_until = EXCLUDED.held_until
      WHERE s.held_until <= now()
    RETURNING slot`,
  ANY_HELD: `SELECT EXISTS (SELECT 1 FROM ${t.relaySlots} WHERE held_until > now()) AS held`,
  RELEASE: `DELETE FROM ${t.relaySlots} WHERE slot = $1 AND holder = $2`,
  STATE: `
    SELECT count(*)::int AS held,
           coalesce(extract(epoch FROM min(held_until) - now()) * 1000, 0)::float8 AS next_free_ms
    FROM ${t.relaySlots} WHERE slot < $1 AND held_until > now()`,
  SURPLUS: `
    SELECT EXISTS (
      SELECT 1 FROM ${t.relaySlots} me JOIN ${t.relaySlots} o ON o.slot <> me.slot
      WHERE me.slot = $1 AND me.holder = $2 AND o.held_until > now()
        AND (o.held_until > me.held_until OR (o.held_until = me.held_until AND o.slot < me.slot))
    ) AS surplus`,
  RETRY_DUE: `
    SELECT EXISTS (
      SELECT 1 FROM ${t.events}
      WHERE retry_after IS NOT NULL AND processed_at IS NULL AND dead_lettered_at IS NULL
        AND retry_after <= now() + $1::float8 * interval '1 millisecond') AS due`,
  BACKLOG: `
    SELECT (SELECT count(*) FROM (
              SELECT 1 FROM ${t.events}
              WHERE retry_after IS NULL AND processed_at IS NULL AND dead_lettered_at IS NULL
                AND (locked_until IS NULL OR locked_until < now())
              LIMIT $1) r)::int AS ready,
           coalesce((
              SELECT extract(epoch FROM now() - coalesce(replayed_at, created_at)) * 1000 FROM ${t.events}
              WHERE retry_after IS NULL AND processed_at IS NULL AND dead_lettered_at IS NULL
                AND (locked_until IS NULL OR locked_until < now())
              ORDER BY seq LIMIT 1), 0)::float8 AS oldest_ms`,
}));

/**
 * Takes a free slot of `0 .. maxRelays - 1` for `holdMs`: the slot's number,
 * or undefined when every one is held.
 */
export async function acquireRelaySlot(
  db: Queryable,
  options: { holder: string; maxRelays: number; holdMs: number; schema?: string | undefined },
): Promise<number | undefined> {
  // A lost race for one slot tries the next; at most one try per slot.
  for (let i = 0; i < options.maxRelays; i++) {
    const { rows } = await db.query(sql(options.schema).ACQUIRE, [
      options.holder,
      options.maxRelays,
      options.holdMs,
    ]);
    if (rows.length > 0) return rows[0].slot as number;
    const state = await relaySlotState(db, options);
    if (state.held >= options.maxRelays) return undefined;
  }
  return undefined;
}

/** Whether any relay holds a slot now: a relay is running. */
export async function anyRelaySlotHeld(db: Queryable, schema?: string | undefined): Promise<boolean> {
  const { rows } = await db.query(sql(schema).ANY_HELD, []);
  return rows[0].held === true;
}

export async function releaseRelaySlot(
  db: Queryable,
  slot: number,
  holder: string,
  schema?: string | undefined,
): Promise<void> {
  await db.query(sql(schema).RELEASE, [slot, holder]);
}

/** Slots of `0 .. maxRelays - 1` held now, and when the first of them frees up (ms from now). */
export async function relaySlotState(
  db: Queryable,
  options: { maxRelays: number; schema?: string | undefined },
): Promise<{ held: number; nextFreeMs: number }> {
  const { rows } = await db.query(sql(options.schema).STATE, [options.maxRelays]);
  return { held: rows[0].held, nextFreeMs: Math.max(0, rows[0].next_free_ms) };
}

/**
 * Whether another relay holds a slot for longer than this one (the holder of
 * `slot`; on a tie, the lower slot counts as longer): of relays sharing a
 * trickle, the one that outlives the others is the one to keep. False when
 * this holder no longer holds `slot`.
 */
export async function relayIsSurplus(
  db: Queryable,
  options: { slot: number; holder: string; schema?: string | undefined },
): Promise<boolean> {
  const { rows } = await db.query(sql(options.schema).SURPLUS, [options.slot, options.holder]);
  return rows[0].surplus === true;
}

/**
 * What is waiting to go out now: ready events (never failed or released, not
 * under a live lease), counted up to `upTo`, and the age of the oldest of
 * them. Both read outbox_events_ready in seq order and stop early, so the
 * check costs what it looks for, not the backlog. Retries waiting out their
 * backoff do not count: more relays would not send them sooner.
 */
export async function readyBacklog(
  db: Queryable,
  options: { upTo: number; schema?: string | undefined },
): Promise<{ ready: number; oldestMs: number }> {
  const { rows } = await db.query(sql(options.schema).BACKLOG, [options.upTo]);
  return { ready: rows[0].ready, oldestMs: Math.max(0, rows[0].oldest_ms) };
}

/**
 * Whether a retry comes due within `ms` (outbox_events_retry_due, read up to
 * that time only): an elastic relay about to leave stays for it.
 */
export async function retryDueWithin(
  db: Queryable,
  ms: number,
  schema?: string | undefined,
): Promise<boolean> {
  const { rows } = await db.query(sql(schema).RETRY_DUE, [ms]);
  return rows[0].due === true;
}
