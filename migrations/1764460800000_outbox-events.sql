-- Up Migration

-- The outbox. Producers insert here in the same transaction as their business
-- rows; the relay claims, publishes and marks rows. Columns beyond the classic
-- outbox shape exist so that the relay never holds a transaction open while it
-- talks to AWS (lease), retries with backoff (retry_after, last_error) and
-- dead-letters explicitly (dead_lettered_at).
CREATE TABLE outbox_events (
  id uuid PRIMARY KEY,
  -- Rows written in one transaction share created_at (now() is the transaction
  -- start); seq gives a stable total order for claiming and per-aggregate ordering.
  seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
  aggregate_type varchar(255) NOT NULL CHECK (aggregate_type <> ''),
  aggregate_id varchar(255) NOT NULL CHECK (aggregate_id <> ''),
  -- 128: EventBridge's DetailType limit; the event type becomes DetailType.
  event_type varchar(128) NOT NULL CHECK (event_type <> ''),
  payload jsonb NOT NULL,
  -- Trace context, correlation ids: forwarded to the broker as-is.
  headers jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  -- Number of times a relay claimed the row (each claim is one publish attempt).
  attempts integer NOT NULL DEFAULT 0,
  -- Earliest time of the next attempt (exponential backoff); NULL = now.
  retry_after timestamptz,
  -- Lease: set by the claim, cleared by the outcome. An expired lease with no
  -- outcome means the relay died mid-batch; the row is claimable again.
  locked_until timestamptz,
  locked_by uuid,
  last_error text,
  -- Targets that already accepted the event, so a retry after a partial
  -- multi-target failure only re-sends to the targets that failed.
  delivered_targets text[] NOT NULL DEFAULT '{}',
  processed_at timestamptz,
  dead_lettered_at timestamptz,
  redrive_count integer NOT NULL DEFAULT 0,
  redriven_at timestamptz
);

-- Only rows a relay may still pick up: stays small however many rows were ever
-- written, so the claim's cost does not grow with history.
CREATE INDEX outbox_events_claimable
  ON outbox_events (seq)
  WHERE processed_at IS NULL AND dead_lettered_at IS NULL;

-- Per-aggregate ordering asks "is there an earlier unfinished event of this
-- aggregate?"; this answers it from unfinished rows only.
CREATE INDEX outbox_events_unfinished_by_aggregate
  ON outbox_events (aggregate_type, aggregate_id, seq)
  WHERE processed_at IS NULL AND dead_lettered_at IS NULL;

-- Retention cleanup deletes processed rows oldest first.
CREATE INDEX outbox_events_processed_at
  ON outbox_events (processed_at)
  WHERE processed_at IS NOT NULL;

CREATE INDEX outbox_events_dead_lettered_at
  ON outbox_events (dead_lettered_at)
  WHERE dead_lettered_at IS NOT NULL;

CREATE VIEW outbox_dead_letters AS
  SELECT id, seq, aggregate_type, aggregate_id, event_type, attempts, last_error,
         created_at, dead_lettered_at, redrive_count, redriven_at
  FROM outbox_events
  WHERE dead_lettered_at IS NOT NULL;

-- Optional wake-up for relays that LISTEN (not behind RDS Proxy). One NOTIFY
-- per statement, not per row, so bulk inserts stay cheap. Created disabled;
-- `npm run migrate -- --notify` (or setNotifyTrigger) turns it on.
CREATE FUNCTION outbox_events_notify() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('outbox_events', '');
  RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_events_notify
  AFTER INSERT ON outbox_events
  FOR EACH STATEMENT EXECUTE FUNCTION outbox_events_notify();

ALTER TABLE outbox_events DISABLE TRIGGER outbox_events_notify;

-- Down Migration
DROP TRIGGER IF EXISTS outbox_events_notify ON outbox_events;
DROP FUNCTION IF EXISTS outbox_events_notify();
DROP VIEW IF EXISTS outbox_dead_letters;
DROP TABLE IF EXISTS outbox_events;
