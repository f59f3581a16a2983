/**
 * `pg-lambda-outbox/relay`: claim outbox rows and publish them. The relay
 * depends on the `Publisher` interface only; `createAwsPublisher` is the SQS
 * and EventBridge one, routed by event type. `loadRelayConfig` reads the
 * reference stack's `OUTBOX_*` environment; `parseRoutes` validates routes
 * given in code.
 */

export { loadRelayConfig, parseRoutes, type RelayConfig } from '../config/relay-config.js';
export { preferGenericPlans } from '../db/queryable.js';
export {
  type CircuitBreakerOptions,
  type CircuitChange,
  type CircuitState,
  logTargetChanges,
} from '../publish/circuit-breaker.js';
export type { LargePayloadOptions } from '../publish/claim-check.js';
export { NullPublisher } from '../publish/null-publisher.js';
export {
  type AwsClient,
  type AwsPublisherOptions,
  createAwsPublisher,
  type RoutingPublisher,
} from '../publish/router.js';
export type { RouteConfig, TargetConfig } from '../publish/routes.js';
export type {
  FailureInfo,
  PublishContext,
  Publisher,
  PublishOutcome,
  TargetResult,
} from '../publish/types.js';
export type { BackoffPolicy } from './backoff.js';
export { type StartRelayOptions, startRelayFromEnv } from './container.js';
export { isScaleOutEvent, isWakeEvent, SCALE_OUT_SOURCE, WAKE_SOURCE } from './invocation.js';
export { type ListenOptions, listenSignal, sleepSignal, type WorkSignal } from './notifier.js';
export { RELAY_DEFAULTS, type RelayOptions, type ResolvedRelayOptions } from './options.js';
export { type BatchReport, Relay, type RelayDeps, type RelaySummary, type RunOptions } from './relay.js';
export { type RelayRunnerSummary, type RunRelayOptions, runRelay } from './runner.js';
