import type { Queryable } from '../db/queryable.js';
import { perSchema } from '../db/schema.js';

// Relay slots (migrations/1764900700000_outbox-relay-slots.sql): at most
// maxRelays runs hold one at a time. Taking a slot inserts it, or takes over
// a row that is no longer held; two relays that pick the same free slot at
// once conflict, and the one that waited on the other's insert finds it
// held and tries the next.
//
// Held: within its holder's time budget (held_until) and alive, its holder
// having renewed alive_until lately (1764900800000_outbox-relay-slot-liveness;
// NULL: a row from before it, alive until held_until).
//
// Closed: a slot held by PARKED_HOLDER, no relay, until held_until. A relay
// that found that more relays did not raise the fleet's rate closes the
// slots it would otherwise start relays for (parkRelaySlots): they count as
// held for whoever takes a slot or starts relays, and as no relay running
// for a producer's wake, a leaving relay's last look and scale in.
export const PARKED_HOLDER = '00000000-0000-0000-0000-000000000000';
const held = (alias: string) =>
  `${alias}.held_until > now() AND (${alias}.alive_until IS NULL OR ${alias}.alive_until > now())`;
export const running = (alias: string) => `${held(alias)} AND ${alias}.holder <> '${PARKED_HOLDER}'::uuid`;
const sql = perSchema((t) => ({
  ACQUIRE: `
    INSERT INTO ${t.relaySlots} AS s (slot, holder, held_until, alive_until)
    SELECT n, $1::uuid, now() + $3::float8 * interval '1 millisecond',
           now() + least($3::float8, $4::float8) * interval '1 millisecond'
    FROM generate_series(0, $2::int - 1) n
    WHERE NOT EXISTS (SELECT 1 FROM ${t.relaySlots} h WHERE h.slot = n AND ${held('h')})
    ORDER BY n
    LIMIT 1
    ON CONFLICT (slot) DO UPDATE
      SET holder = EXCLUDED.holder, held_until = EXCLUDED.held_until, alive_until = EXCLUDED.alive_until
      WHERE NOT (${held('s')})
    RETURNING slot`,
  RENEW: `
    WITH renewed AS (
      UPDATE ${t.relaySlots} s
      SET alive_until = least(s.held_until, now() + $3::float8 * interval '1 millisecond')
      WHERE s.slot = $1 AND s.holder = $2 AND ${held('s')}
      RETURNING slot)
    SELECT EXISTS (SELECT 1 FROM renewed) AS renewed,
           EXISTS (SELECT 1 FROM ${t.relaySlots} s
                   WHERE s.slot = $1 AND s.holder = '${PARKED_HOLDER}'::uuid AND ${held('s')}) AS closed`,
  RELEASE: `DELETE FROM ${t.relaySlots} WHERE slot = $1 AND holder = $2`,
  STATE: `
    SELECT count(*)::int AS held,
           (count(*) FILTER (WHERE s.holder <> '${PARKED_HOLDER}'::uuid))::int AS running,
           min(s.slot) FILTER (WHERE s.holder <> '${PARKED_HOLDER}'::uuid) AS lowest,
           coalesce(extract(epoch FROM min(s.held_until) - now()) * 1000, 0)::float8 AS next_free_ms
    FROM ${t.relaySlots} s WHERE s.slot < $1 AND ${held('s')}`,
  PARK: `
    WITH kept AS (
      SELECT s.slot FROM ${t.relaySlots} s
      WHERE s.slot < $2 AND ${running('s')}
      ORDER BY (s.slot = $1) DESC, s.slot
      LIMIT $3)
    INSERT INTO ${t.relaySlots} AS s (slot, holder, held_until, alive_until)
    SELECT n, '${PARKED_HOLDER}'::uuid, now() + $4::float8 * interval '1 millisecond',
           now() + $4::float8 * interval '1 millisecond'
    FROM generate_series(0, $2::int - 1) n
    WHERE n <> $1 AND n NOT IN (SELECT slot FROM kept)
      AND EXISTS (SELECT 1 FROM ${t.relaySlots} me WHERE me.slot = $1 AND me.holder = $5::uuid AND ${running('me')})
    ON CONFLICT (slot) DO UPDATE
      SET holder = EXCLUDED.holder, held_until = EXCLUDED.held_until, alive_until = EXCLUDED.alive_until
    RETURNING slot`,
  SURPLUS: `
    SELECT EXISTS (
      SELECT 1 FROM ${t.relaySlots} me JOIN ${t.relaySlots} o ON o.slot <> me.slot
      WHERE me.slot = $1 AND me.holder = $2 AND ${running('o')}
        AND (o.held_until > me.held_until OR (o.held_until = me.held_until AND o.slot < me.slot))
    ) AS surplus`,
  RETRY_DUE: `
    SELECT EXISTS (
      SELECT 1 FROM ${t.events}
      WHERE retry_after IS NOT NULL AND retry_after IS DISTINCT FROM parked_until
        AND processed_at IS NULL AND dead_lettered_at IS NULL
        AND retry_after <= now() + $1::float8 * interval '1 millisecond') AS due`,
  BACKLOG: `
    SELECT count(*)::int AS ready FROM (
      SELECT 1 FROM ${t.events}
      WHERE retry_after IS NULL AND processed_at IS NULL AND dead_lettered_at IS NULL
        AND (locked_until IS NULL OR locked_until < now())
      LIMIT $1) r`,
}));

/**
 * Takes a free slot of `0 .. maxRelays - 1` for `holdMs`: the slot's number,
 * or undefined when every one is held. The holder must renew it
 * ({@link renewRelaySlot}) within `aliveMs`, or the slot frees then.
 */
export async function acquireRelaySlot(
  db: Queryable,
  options: {
    holder: string;
    maxRelays: number;
    holdMs: number;
    aliveMs: number;
    schema?: string | undefined;
  },
): Promise<number | undefined> {
  // A lost race for one slot tries the next; at most one try per slot.
  for (let i = 0; i < options.maxRelays; i++) {
    const { rows } = await db.query(sql(options.schema).ACQUIRE, [
      options.holder,
      options.maxRelays,
      options.holdMs,
      options.aliveMs,
    ]);
    if (rows.length > 0) return rows[0].slot as number;
    const state = await relaySlotState(db, options);
    if (state.held >= options.maxRelays) return undefined;
  }
  return undefined;
}

/**
 * The holder of `slot` is alive: its slot stays held for another `aliveMs`
 * (never past its budget). `renewed` false: it no longer holds the slot (not
 * renewed in time and taken by another relay, or released); `closed`: the
 * relay that scales closed it (parkRelaySlots).
 */
export async function renewRelaySlot(
  db: Queryable,
  options: { slot: number; holder: string; aliveMs: number; schema?: string | undefined },
): Promise<{ renewed: boolean; closed: boolean }> {
  const { rows } = await db.query(sql(options.schema).RENEW, [options.slot, options.holder, options.aliveMs]);
  return { renewed: rows[0].renewed === true, closed: rows[0].closed === true };
}

export async function releaseRelaySlot(
  db: Queryable,
  slot: number,
  holder: string,
  schema?: string | undefined,
): Promise<void> {
  await db.query(sql(schema).RELEASE, [slot, holder]);
}

/** The slots of `0 .. maxRelays - 1` now. */
export interface SlotState {
  /** Slots held, closed ones included. */
  held: number;
  /** Slots held by running relays. */
  running: number;
  /** The lowest slot a running relay holds (null: none). */
  lowest: number | null;
  /** When the first held slot frees up, ms from now. */
  nextFreeMs: number;
}

export async function relaySlotState(
  db: Queryable,
  options: { maxRelays: number; schema?: string | undefined },
): Promise<SlotState> {
  const { rows } = await db.query(sql(options.schema).STATE, [options.maxRelays]);
  return {
    held: rows[0].held,
    running: rows[0].running,
    lowest: rows[0].lowest,
    nextFreeMs: Math.max(0, rows[0].next_free_ms),
  };
}

/**
 * Closes every slot of `0 .. maxRelays - 1` for `parkMs` but those of `keep`
 * running relays: `slot`, which `holder` must hold (else nothing is closed),
 * and the lowest other slots (see "Closed" above); a relay whose slot is
 * closed finds so at its next renewal. Returns the slots closed.
 */
export async function parkRelaySlots(
  db: Queryable,
  options: {
    slot: number;
    holder: string;
    keep: number;
    maxRelays: number;
    parkMs: number;
    schema?: string | undefined;
  },
): Promise<number[]> {
  const { rows } = await db.query(sql(options.schema).PARK, [
    options.slot,
    options.maxRelays,
    Math.max(1, options.keep),
    options.parkMs,
    options.holder,
  ]);
  return rows.map((r) => r.slot as number).sort((a, b) => a - b);
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
 * Ready events (never failed or released, not under a live lease), counted
 * up to `upTo`: read from outbox_events_ready in seq order, stopping early,
 * so the check costs what it looks for, not the backlog. Retries waiting
 * out their backoff do not count: more relays would not send them sooner.
 * (How far behind the relay is comes from its claims: scale-policy.ts.)
 */
export async function readyBacklog(
  db: Queryable,
  options: { upTo: number; schema?: string | undefined },
): Promise<{ ready: number }> {
  const { rows } = await db.query(sql(options.schema).BACKLOG, [options.upTo]);
  return { ready: rows[0].ready };
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
