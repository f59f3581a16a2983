-- Up Migration

-- Dead letters in seq order, by index. The operators' listing (CLI
-- `dead-letters`, listDeadLetters, the console's dead-letter route) shows
-- the oldest dead letters first, the order a redrive resets them in. Without
-- this index PostgreSQL walked the table's seq order and filtered out every
-- row that is not a dead letter: when the dead letters are the newest rows
-- (a target that just broke), a page stepped over every published row before
-- them, 300-400 ms at 1,000,000 events. Dead letters are few: the index is
-- small, and written only when an event is dead-lettered.
--
-- On a large live table, create the index CONCURRENTLY by hand before
-- migrating (this file then finds it).

CREATE INDEX IF NOT EXISTS outbox_events_dead_letters_by_seq
  ON outbox_events (seq)
  WHERE dead_lettered_at IS NOT NULL;

-- Down Migration
DROP INDEX IF EXISTS outbox_events_dead_letters_by_seq;
