-- Up Migration

-- payload_bytes: the payload's size in bytes as the producer wrote it (its
-- JSON text, UTF-8), set by enqueueEvents. The claim stops at a byte budget
-- (a batch of 100 rows of 10 MiB each would take a relay of 512 MB well past
-- its memory before a single message was sent), and the budget needs each
-- row's size without reading its payload. A row written some other way has
-- NULL here; the claim then counts the length of its text (not its stored
-- size: TOAST may have compressed it to a fraction of what the relay holds).
--
-- Nullable without a default: adding it rewrites nothing.
ALTER TABLE outbox_events ADD COLUMN payload_bytes integer;

-- Down Migration
ALTER TABLE outbox_events DROP COLUMN IF EXISTS payload_bytes;
