import type { Queryable } from '../db/queryable.js';
import { perSchema } from '../db/schema.js';

// The producers' wake marker (migrations/1764901100000_outbox-relay-wake.sql):
// one row whose woken_at a wake sets only when no other wake set it within
// the grace window. A relay that takes or lets go of a slot clears it (a
// trigger on outbox_relay_slots), so the window only covers a woken relay's
// cold start. Concurrent wakes queue on the row: one sets it, the others
// find it set.
const sql = perSchema((t) => ({
  CLAIM: `
    INSERT INTO ${t.relayWake} AS w (id, woken_at) VALUES (true, now())
    ON CONFLICT (id) DO UPDATE SET woken_at = EXCLUDED.woken_at
      WHERE w.woken_at IS NULL OR w.woken_at <= now() - $1::float8 * interval '1 millisecond'
    RETURNING woken_at`,
}));

/**
 * Claims the wake for this producer: true when no wake was claimed within
 * `graceMs` since a relay last took or let go of a slot; this producer then
 * invokes the relay and the others' wakes invoke nothing until the woken
 * relay takes its slot or `graceMs` passes.
 */
export async function claimRelayWake(
  db: Queryable,
  options: { graceMs: number; schema?: string | undefined },
): Promise<boolean> {
  const { rows } = await db.query(sql(options.schema).CLAIM, [options.graceMs]);
  return rows.length > 0;
}
