-- Up Migration

-- The reference stack's example domain (npm start, the tests, the deployed
-- stack): an order service that must tell others about new orders. Not part
-- of the package's migrations: `migrate()` creates the outbox's own tables
-- only. Applied by scripts/local/example-schema.ts (bookkeeping in
-- example_migrations). IF NOT EXISTS: databases migrated by an older version
-- already have these tables.
CREATE TABLE IF NOT EXISTS orders (
  id uuid PRIMARY KEY,
  customer_id varchar(255) NOT NULL,
  total_cents bigint NOT NULL CHECK (total_cents >= 0),
  currency char(3) NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Written by the example consumer. Deliberately not unique per order: a
-- duplicate delivery that slipped past the dedupe would show as a second row.
CREATE TABLE IF NOT EXISTS order_notifications (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  order_id uuid NOT NULL,
  event_id uuid NOT NULL,
  notified_at timestamptz NOT NULL DEFAULT now()
);

-- Down Migration
DROP TABLE IF EXISTS order_notifications;
DROP TABLE IF EXISTS orders;
