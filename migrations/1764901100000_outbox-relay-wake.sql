-- Up Migration

-- A producer's wake, shared by every producer process (createRelayWaker with
-- a database). Before it, each commit made while no relay held a slot
-- invoked the relay: a burst of commits before the first woken relay took
-- its slot started a relay per commit, each opening database sessions to
-- find the slot taken (20 producers, a 500 ms cold start: the server's
-- max_connections ran out). Now a wake invokes the relay only when it sets
-- woken_at: no relay holds a slot and no other wake did within the waker's
-- grace window (a cold start). A relay that takes or lets go of a slot
-- clears woken_at, so the next wake after a relay left invokes again at
-- once; a woken relay that never starts silences wakes for the grace
-- window only. One row at most.
CREATE TABLE IF NOT EXISTS outbox_relay_wake (
  id boolean PRIMARY KEY DEFAULT true CHECK (id),
  woken_at timestamptz
);

-- The table beside the slots (TG_TABLE_SCHEMA): right whatever the
-- session's search_path, with or without a schema of the team's choosing.
CREATE OR REPLACE FUNCTION outbox_relay_wake_clear() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('UPDATE %I.outbox_relay_wake SET woken_at = NULL WHERE woken_at IS NOT NULL',
                 TG_TABLE_SCHEMA);
  RETURN NULL;
END;
$$;

-- Renewals (alive_until only) do not fire it.
DROP TRIGGER IF EXISTS outbox_relay_wake_clear ON outbox_relay_slots;
CREATE TRIGGER outbox_relay_wake_clear
  AFTER INSERT OR DELETE OR UPDATE OF holder ON outbox_relay_slots
  FOR EACH ROW EXECUTE FUNCTION outbox_relay_wake_clear();

-- Down Migration
DROP TRIGGER IF EXISTS outbox_relay_wake_clear ON outbox_relay_slots;
DROP FUNCTION IF EXISTS outbox_relay_wake_clear();
DROP TABLE IF EXISTS outbox_relay_wake;
