-- Up Migration

-- Replay: an operator republishes events that were already published.
--
-- A replayed row goes back to pending in place: processed_at is cleared, so the
-- claim's partial indexes pick it up again and the relay publishes it as it
-- publishes anything else (batching, retries, dead letters, ordering), with
-- the replay's id as a marker on the message. The row keeps its id, seq,
-- created_at and payload; what the replay changes is recorded here:
-- - replay_id: the replay that last republished it (kept after publication:
--   the history; a dead-lettered replay redriven later still goes out as that
--   replay);
-- - replayed_at: when that replay was requested (the relay measures a
--   replay's pending age from it, not from created_at);
-- - replay_count: how many replays took it;
-- - first_processed_at: when it was first published (processed_at is the
--   latest publication once a replay has gone out).
-- All nullable or with a constant default: adding them rewrites nothing.
ALTER TABLE outbox_events
  ADD COLUMN replay_id uuid,
  ADD COLUMN replayed_at timestamptz,
  ADD COLUMN replay_count integer NOT NULL DEFAULT 0,
  ADD COLUMN first_processed_at timestamptz;

-- The audit trail, one row per replay (dry runs write nothing): who asked
-- (requested_by as stated by the operator or the CLI's OS user; caller: the
-- Lambda caller identity the redrive function logs, or the CLI's user and
-- host), when, the validated filter, how many matched and how many were
-- replayed, and which events. Deleted by cleanup after
-- OUTBOX_REPLAY_RETENTION_DAYS, but never while one of its events is still
-- waiting to be republished.
CREATE TABLE outbox_replays (
  id uuid PRIMARY KEY,
  requested_at timestamptz NOT NULL DEFAULT now(),
  requested_by text NOT NULL,
  caller jsonb NOT NULL DEFAULT '{}'::jsonb,
  filter jsonb NOT NULL,
  matched integer NOT NULL,
  replayed integer NOT NULL,
  event_ids uuid[] NOT NULL
);

CREATE INDEX outbox_replays_requested_at ON outbox_replays (requested_at);

-- Replayed rows not yet republished (pending, or a dead-lettered replay):
-- what cleanup asks before deleting an audit row. Small: only such rows.
CREATE INDEX outbox_events_replays_waiting
  ON outbox_events (replay_id)
  WHERE replay_id IS NOT NULL AND processed_at IS NULL;

-- Consumer dedupe of replays, for consumers that handle them
-- (createConsumer({ replays: 'handle' })): one row per (consumer, event,
-- replay), so each replay of an event is handled once. A table of its own
-- rather than a wider primary key on processed_events: changing that key
-- would rebuild a large, busy index under an exclusive lock, and consumers of
-- an older version keep working unchanged. Cleaned with processed_events'
-- retention.
CREATE TABLE processed_event_replays (
  consumer varchar(255) NOT NULL,
  event_id uuid NOT NULL,
  replay_id uuid NOT NULL,
  event_type varchar(128),
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, event_id, replay_id)
);

CREATE INDEX processed_event_replays_processed_at ON processed_event_replays (processed_at);

-- Down Migration
DROP TABLE IF EXISTS processed_event_replays;
DROP INDEX IF EXISTS outbox_events_replays_waiting;
DROP TABLE IF EXISTS outbox_replays;
ALTER TABLE outbox_events
  DROP COLUMN IF EXISTS first_processed_at,
  DROP COLUMN IF EXISTS replay_count,
  DROP COLUMN IF EXISTS replayed_at,
  DROP COLUMN IF EXISTS replay_id;
