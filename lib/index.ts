/**
 * `pg-lambda-outbox`: the write side. `createOutbox({ schema })` says once
 * where the outbox lives and writes events, runs operations and is given to
 * consumers; enqueue events in the transaction that writes your business
 * data, migrate the outbox tables, and the error hierarchy every entry point
 * throws from. Everything not re-exported here or
 * from the other entry points (`/consumer`, `/relay`, `/operations`,
 * `/lambda`) is internal and may change in any release.
 */

export { ConnectionLostError } from './db/connection-guard.js';
export { TransactionTimeoutError } from './db/guarded-client.js';
export {
  MIGRATIONS_DIR,
  type MigrateOptions,
  type MigrationSql,
  type MigrationSqlOptions,
  migrate,
  migrationSql,
  setNotifyTrigger,
} from './db/migrate.js';
export { type TransactionOptions, withTransaction } from './db/transaction.js';
export {
  ConfigError,
  DatabaseUnavailableError,
  OutboxError,
  OutboxSchemaError,
  PublishError,
  TransactionRolledBackError,
  ValidationError,
} from './errors.js';
export type { MetricUnit, OutboxLogger, OutboxMetrics } from './observer.js';
export { type EnqueueOptions, enqueueEvent, enqueueEvents, type Queryable } from './outbox/enqueue.js';
export {
  BROKER_MESSAGE_MAX_BYTES,
  ENQUEUE_CALL_MAX_BYTES,
  LARGE_PAYLOAD_MAX_BYTES,
} from './outbox/limits.js';
export {
  createOutbox,
  type Outbox,
  type OutboxContractWrites,
  type OutboxOperations,
  type OutboxOptions,
  type OutboxWriteOptions,
  type OutboxWrites,
} from './outbox/outbox.js';
export {
  createRelayWaker,
  type LambdaSender,
  type RelayWaker,
  type RelayWakerOptions,
  type WakeOutcome,
} from './outbox/relay-waker.js';
export type { NewOutboxEvent, OutboxEvent } from './outbox/types.js';
export type { ValidateOptions } from './outbox/validate-event.js';
export type { Envelope } from './publish/envelope.js';
