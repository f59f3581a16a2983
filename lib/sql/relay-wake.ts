import type { Queryable } from '../db/queryable.js';
import { perSchema } from '../db/schema.js';
import { running } from './relay-slots.js';

// The producers' wake marker (migrations/1764901100000_outbox-relay-wake.sql):
// one row whose woken_at a wake sets only when no relay runs and no other
// wake set it within the grace window. A relay that takes or lets go of a
// slot clears it (a trigger on outbox_relay_slots), so the window only
// covers a woken relay's cold start. Concurrent wakes queue on the row: one
// sets it, the others find it set.
const sql = perSchema((t) => ({
  CLAIM: `
    WITH relay AS (SELECT EXISTS (SELECT 1 FROM ${t.relaySlots} s WHERE ${running('s')}) AS running),
    claimed AS (
      INSERT INTO ${t.relayWake} AS w (id, woken_at) SELECT true, now() WHERE NOT (SELECT running FROM relay)
      ON CONFLICT (id) DO UPDATE SET woken_at = EXCLUDED.woken_at
        WHERE w.woken_at IS NULL OR w.woken_at <= now() - $1::float8 * interval '1 millisecond'
      RETURNING woken_at)
    SELECT (SELECT running FROM relay) AS running, EXISTS (SELECT 1 FROM claimed) AS claimed`,
}));

/**
 * Claims the wake for this producer, in one round trip: `relay-running` when
 * a relay holds a slot (it takes the events, or looks for them as it leaves;
 * a closed slot is no relay), `debounced` when another wake was claimed
 * within `graceMs` since a relay last took or let go of a slot, undefined
 * when this producer should invoke the relay (the others' wakes then invoke
 * nothing until the woken relay takes its slot or `graceMs` passes).
 */
export async function claimRelayWake(
  db: Queryable,
  options: { graceMs: number; schema?: string | undefined },
): Promise<'relay-running' | 'debounced' | undefined> {
  const { rows } = await db.query(sql(options.schema).CLAIM, [options.graceMs]);
  if (rows[0].running === true) return 'relay-running';
  return rows[0].claimed === true ? undefined : 'debounced';
}
