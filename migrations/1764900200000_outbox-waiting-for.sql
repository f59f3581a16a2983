-- Up Migration

-- Targets an event is waiting for: set when it was retried because a target
-- failed for reasons of the environment (outage, throttling, access denied),
-- cleared by its next outcome. When such a target answers again, the relay
-- releases these events at once instead of letting them wait out their hold.
-- Nullable with no default: adding it rewrites nothing.
ALTER TABLE outbox_events ADD COLUMN waiting_for text[];

-- Down Migration
ALTER TABLE outbox_events DROP COLUMN IF EXISTS waiting_for;
