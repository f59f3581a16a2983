-- Up Migration

-- One row per aggregate, locked by enqueueEvents inside the producer's
-- transaction before its events get their seq. Two producers writing the same
-- aggregate therefore take turns: the second one's events are numbered only
-- after the first has committed (or rolled back), so seq order is commit order
-- within an aggregate and the relay publishes them in that order.
--
-- A row lock and not pg_advisory_xact_lock: see docs/ordering.md (RDS Proxy
-- pinning, a shared 64-bit key space, visibility in pg_locks).
--
-- The row carries no state: it is only ever inserted (once per aggregate) and
-- locked, never updated, so locking it writes no new row version. created_at
-- lets cleanup prune rows nobody has needed for a while; a pruned row is
-- simply inserted again by the next producer of that aggregate.
CREATE TABLE outbox_aggregate_locks (
  aggregate_type varchar(255) NOT NULL,
  aggregate_id varchar(255) NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (aggregate_type, aggregate_id)
);

CREATE INDEX outbox_aggregate_locks_created_at ON outbox_aggregate_locks (created_at);

-- Down Migration
DROP TABLE IF EXISTS outbox_aggregate_locks;
