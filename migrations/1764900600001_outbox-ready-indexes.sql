-- Up Migration

-- The ordered claim walks the oldest unfinished rows (outbox_events_claimable)
-- and takes the aggregates whose head is among them. When most aggregates are
-- held (their heads back off, waiting for a target that is down) that walk
-- finds only held heads, and the claim fell back to a probe of every
-- aggregate with unfinished events: 1.2 s per empty claim with 100,000 held
-- aggregates, repeated by every worker at every poll, exactly while a target
-- is down. These two indexes hold only the rows a claim could take:
--
-- outbox_events_ready: unfinished rows not backing off (never failed, or
--   released), in seq order;
-- outbox_events_retry_due: unfinished rows that failed and wait for their
--   retry_after, in that order; a claim reads only the part that is due.
--
-- A held head is in neither part a claim reads, so the claim's second look
-- (lib/sql/claim-batch.ts) costs what there is to claim, not what is held.
-- The price: retry_after is now an indexed column, so an outcome that sets
-- or clears it (a retry with a wait, releaseWaiting) is no HOT update and
-- writes its index entries; events held back behind an earlier one of their
-- aggregate are recorded without a retry_after, so the common retry of
-- ordered runs does not pay it. On a large live table, create both indexes
-- CONCURRENTLY by hand before migrating (this file then finds them).

CREATE INDEX IF NOT EXISTS outbox_events_ready
  ON outbox_events (seq)
  WHERE retry_after IS NULL AND processed_at IS NULL AND dead_lettered_at IS NULL;

CREATE INDEX IF NOT EXISTS outbox_events_retry_due
  ON outbox_events (retry_after)
  WHERE retry_after IS NOT NULL AND processed_at IS NULL AND dead_lettered_at IS NULL;

-- Down Migration
DROP INDEX IF EXISTS outbox_events_retry_due;
DROP INDEX IF EXISTS outbox_events_ready;
