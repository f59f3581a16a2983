-- Up Migration

-- An operator can discard a dead letter: it is finished without being
-- published. processed_at is set (so the claim, the dead-letter view and
-- retention treat it like any finished row), dead_lettered_at is cleared (it
-- leaves the dead-letter view and no longer holds its aggregate), and
-- discarded_at / discarded_by say that it was never sent and who decided so.
-- last_error keeps the reason it had been dead-lettered.
ALTER TABLE outbox_events
  ADD COLUMN discarded_at timestamptz,
  ADD COLUMN discarded_by text;

-- Only discarded rows carry a processed_at without having been published.
ALTER TABLE outbox_events
  ADD CONSTRAINT outbox_events_discarded_is_processed
  CHECK (discarded_at IS NULL OR processed_at IS NOT NULL);

-- In ordered mode with the `block` dead-letter policy, the claim asks "does
-- this aggregate have a dead letter before this event?". Dead letters are few;
-- this answers it by index however long the aggregate's history is.
CREATE INDEX outbox_events_dead_letters_by_aggregate
  ON outbox_events (aggregate_type, aggregate_id, seq)
  WHERE dead_lettered_at IS NOT NULL;

-- What operators discarded, newest first: the history the dead-letter view no
-- longer shows.
CREATE VIEW outbox_discarded_events AS
  SELECT id, seq, aggregate_type, aggregate_id, event_type, attempts, last_error,
         created_at, discarded_at, discarded_by, redrive_count, redriven_at
  FROM outbox_events
  WHERE discarded_at IS NOT NULL;

-- Down Migration
DROP VIEW IF EXISTS outbox_discarded_events;
DROP INDEX IF EXISTS outbox_events_dead_letters_by_aggregate;
ALTER TABLE outbox_events DROP CONSTRAINT IF EXISTS outbox_events_discarded_is_processed;
ALTER TABLE outbox_events DROP COLUMN IF EXISTS discarded_by, DROP COLUMN IF EXISTS discarded_at;
