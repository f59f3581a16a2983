-- Up Migration

-- Consumer-side dedupe: one row per (consumer, event) committed in the same
-- transaction as the consumer's own writes. Keyed by consumer so that several
-- consumers can share one database.
CREATE TABLE processed_events (
  consumer varchar(255) NOT NULL,
  event_id uuid NOT NULL,
  event_type varchar(128),
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, event_id)
);

CREATE INDEX processed_events_processed_at ON processed_events (processed_at);

-- Down Migration
DROP TABLE IF EXISTS processed_events;
