-- Up Migration

-- Intentionally empty. Up to version 0.1.0 this migration created the
-- reference stack's example tables (orders, order_notifications) in every
-- database it migrated, where a service's own `orders` table made it fail.
-- They now belong to the reference stack (migrations/example/), not to the
-- outbox. The name stays so that databases which ran the old version keep
-- their migration history in order; their example tables are left as they are.

-- Down Migration
