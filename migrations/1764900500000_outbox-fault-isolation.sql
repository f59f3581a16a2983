-- Up Migration

-- Fault isolation: who pays for a lost lease, and for how long an outage may
-- keep an event waiting.
--
-- claimed_alone: whether the row's latest lease held it alone. A lease that
-- expires without an outcome (the relay died, timed out, or could not record
-- the outcome) leaves every row of the batch orphaned. An orphan from a batch
-- is not known to be at fault: it is claimed again alone, and no attempt is
-- counted for the lost lease. An orphan whose lease held it alone killed its
-- relay by itself: that lost lease counts, and once its attempts are used up
-- the claim dead-letters it. So only the row that keeps killing the relay ends
-- in dead letters, never its neighbours.
--
-- failing_since: when the current run of environment failures (outage,
-- throttling, an open circuit, a deadline) began, since the event was last
-- asked to go out (enqueue, redrive, replay clear it). The maximum pending age
-- counts from here, so a redriven old event, or a backlog that waited for a
-- relay that was down, is not dead-lettered by the first failed call.
--
-- Nullable, or a constant default: adding them rewrites nothing.
ALTER TABLE outbox_events
  ADD COLUMN claimed_alone boolean NOT NULL DEFAULT false,
  ADD COLUMN failing_since timestamptz;

-- Down Migration
ALTER TABLE outbox_events
  DROP COLUMN IF EXISTS failing_since,
  DROP COLUMN IF EXISTS claimed_alone;
