-- Up Migration

-- Two columns the claim writes (lib/sql/claim-batch.ts, claim-ordered.ts).
--
-- parked_until: an ordered claim "parks" a row it found in its way that
-- cannot go before an earlier event of its aggregate does (a tail behind a
-- head that backs off or is leased, or a head held back by a dead letter):
-- it sets retry_after and parked_until to the time that hold ends, so the
-- row leaves outbox_events_ready (and the due part of
-- outbox_events_retry_due) until then, and the claim's second look sees past
-- it. While retry_after = parked_until the row is not backing off on its own
-- account: a run led by its head takes it, and the claim that takes the row
-- before it clears the park. Before this, such rows filled the claim's
-- second look and sent every claim to a probe of every aggregate (2 s a
-- claim with 100,000 aggregates in an outage).
--
-- claimed_with: how many rows the row's latest lease took. An orphan whose
-- lost lease held more than a few rows is reclaimed in a batch of at most
-- half that many instead of alone, one per round trip (see "Fault
-- isolation" in claim-batch.ts). 0: claimed before this column existed.
--
-- Nullable, or a constant default: adding them rewrites nothing and builds
-- no index, so this is safe on a large live table (a brief lock to change
-- the catalog).
ALTER TABLE outbox_events
  ADD COLUMN IF NOT EXISTS parked_until timestamptz,
  ADD COLUMN IF NOT EXISTS claimed_with integer NOT NULL DEFAULT 0;

-- Down Migration
ALTER TABLE outbox_events
  DROP COLUMN IF EXISTS claimed_with,
  DROP COLUMN IF EXISTS parked_until;
