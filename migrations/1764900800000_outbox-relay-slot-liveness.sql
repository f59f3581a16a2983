-- Up Migration

-- Relay slot liveness. A slot is held until held_until, the end of its
-- holder's time budget; a relay killed mid-run (out of memory, a crash of
-- its runtime) used to keep its slot until then, and producers' wakes and
-- schedule ticks deferred to it: events committed meanwhile waited up to the
-- relay's timeout. A running relay now renews alive_until every few seconds
-- (a fraction of OUTBOX_SLOT_ALIVE_MS); a slot whose alive_until has passed
-- is free, so a dead relay's slot frees within that window. held_until keeps
-- its meaning (how long the holder may still claim: who outlives whom, and
-- how long a handover waits). NULL, a row of a relay from before this
-- migration: held until held_until, as before.
ALTER TABLE outbox_relay_slots ADD COLUMN IF NOT EXISTS alive_until timestamptz;

-- Down Migration
ALTER TABLE outbox_relay_slots DROP COLUMN IF EXISTS alive_until;
