-- Up Migration

-- The ordered claim finds each aggregate's head (earliest unfinished event) by
-- a skip scan: one `ORDER BY aggregate_type, aggregate_id, seq LIMIT 1` probe
-- per aggregate. This index replaces outbox_events_unfinished_by_aggregate
-- with the same columns and rows, but a predicate written differently from
-- outbox_events_claimable's: on a table without statistics PostgreSQL guesses
-- that `x IS NULL` matches 0.5% of rows, so both partial indexes looked almost
-- empty and the probe could walk outbox_events_claimable (every pending row)
-- and sort. A query that says `num_nulls(processed_at, dead_lettered_at) = 2`
-- can only use this index, whose order is the one the probe asks for; the
-- unordered claim says `IS NULL` and keeps using outbox_events_claimable.
-- (On a large live table, create it CONCURRENTLY by hand before migrating.)
CREATE INDEX IF NOT EXISTS outbox_events_aggregate_heads
  ON outbox_events (aggregate_type, aggregate_id, seq)
  WHERE num_nulls(processed_at, dead_lettered_at) = 2;

DROP INDEX IF EXISTS outbox_events_unfinished_by_aggregate;

-- Down Migration
CREATE INDEX IF NOT EXISTS outbox_events_unfinished_by_aggregate
  ON outbox_events (aggregate_type, aggregate_id, seq)
  WHERE processed_at IS NULL AND dead_lettered_at IS NULL;
DROP INDEX IF EXISTS outbox_events_aggregate_heads;
