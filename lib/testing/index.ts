/**
 * `pg-lambda-outbox/testing`: test your service's events without AWS.
 * `testOutbox` runs the real relay over your database into an in-memory
 * publisher that keeps the exact messages SQS and EventBridge would have
 * received, and feeds them to your consumer as Lambda would. Loads no AWS
 * SDK. docs/testing.md shows it in a vitest suite.
 */

export type { Envelope } from '../publish/envelope.js';
export type { RouteConfig, TargetConfig } from '../publish/routes.js';
export type { RelayOptions } from '../relay/options.js';
export type { RelaySummary } from '../relay/relay.js';
export {
  DEFAULT_RULE_QUEUE_URL,
  type DeliverOptions,
  type DeliverResult,
  type MessageConsumer,
} from './deliver.js';
export {
  DEFAULT_TEST_QUEUE_URL,
  type EventBridgeEntry,
  InMemoryPublisher,
  type InMemoryPublisherOptions,
  type PublishedMessage,
  type SqsEntry,
  type TargetFailure,
} from './in-memory-publisher.js';
export { type Drained, type TestOutbox, type TestOutboxOptions, testOutbox } from './test-outbox.js';
