-- Up Migration

-- Relay slots: how many relays drain the outbox at once. An elastic relay
-- that finds a backlog starts more relays (OUTBOX_MAX_RELAYS); each run holds
-- one slot of 0 .. max - 1 for as long as it may claim, and a run that finds
-- every slot held returns at once. A slot is held until held_until, the end
-- of its holder's time budget: a relay that dies without releasing its slot
-- frees it when its invocation would have timed out anyway. Never more rows
-- than the largest OUTBOX_MAX_RELAYS ever used.
CREATE TABLE IF NOT EXISTS outbox_relay_slots (
  slot integer PRIMARY KEY CHECK (slot >= 0),
  holder uuid NOT NULL,
  held_until timestamptz NOT NULL
);

-- Down Migration
DROP TABLE IF EXISTS outbox_relay_slots;
