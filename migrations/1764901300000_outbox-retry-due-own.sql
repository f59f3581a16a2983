-- Up Migration

-- Retries that back off on their own account, without the ordered claim's
-- parks. A park (lib/sql/claim-ordered.ts) sets retry_after = parked_until
-- on a row that waits behind an earlier event of its aggregate: it is not a
-- retry of its own, and comes due when its aggregate's hold ends (the held
-- head's own retry_after, a lease, a dead letter), not before. An elastic
-- relay about to leave asks whether a retry comes due soon
-- (retryDueWithin, lib/sql/relay-slots.ts): through outbox_events_retry_due
-- it stepped over every park in that window, row by row, and stayed for the
-- first one that was due. This index holds only the rows that back off on
-- their own (a failed event waiting for its retry), so that question reads
-- one entry. It is small: backing-off rows only, never the parks (an outage
-- of 100,000 aggregates parks up to one row behind each held head).
--
-- The price: a retry with a wait writes one more index entry. On a large
-- live table, create the index CONCURRENTLY by hand before migrating (this
-- file then finds it).

CREATE INDEX IF NOT EXISTS outbox_events_retry_own
  ON outbox_events (retry_after)
  WHERE retry_after IS NOT NULL AND retry_after IS DISTINCT FROM parked_until
    AND processed_at IS NULL AND dead_lettered_at IS NULL;

-- Down Migration
DROP INDEX IF EXISTS outbox_events_retry_own;
