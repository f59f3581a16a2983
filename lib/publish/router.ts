import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import type { SQSClient } from '@aws-sdk/client-sqs';
import pLimit from 'p-limit';
import { ConfigError } from '../errors.js';
import type { OutboxEvent } from '../outbox/types.js';
import * as z from '../zod.js';
import { aggregateKey, heldBack } from './batching.js';
import { CircuitBreaker, type CircuitBreakerOptions, type CircuitChange } from './circuit-breaker.js';
import { type LargePayloadOptions, PayloadStore, type S3Sender } from './claim-check.js';
import { EventBridgeTransport } from './eventbridge-transport.js';
import { routesSchema } from './route-schemas.js';
import { type RouteConfig, RouteTable, type TargetConfig, targetKey } from './routes.js';
import { SqsTransport } from './sqs-transport.js';
import type {
  FailureInfo,
  PublishContext,
  Publisher,
  PublishOutcome,
  TargetResult,
  Transport,
} from './types.js';

export interface RoutingPublisherOptions {
  /** Settings of every target's circuit breaker. */
  circuit?: CircuitBreakerOptions;
  /** Told when a target's circuit opens or closes (log it). */
  onTargetChange?: (target: string, change: CircuitChange) => void;
}

/**
 * Sends each event to every target its route names, skipping targets that
 * accepted it on an earlier attempt. An event is published only when all its
 * targets accepted it; an event with no route fails permanently.
 *
 * Each target has a circuit breaker: a target whose calls keep failing for
 * environment reasons is not called at all (its events are held back without
 * spending attempts), then probed with a single-entry call at growing
 * intervals; healthy targets go on as usual.
 */
export class RoutingPublisher implements Publisher {
  private readonly transports: Map<string, Transport>;
  private readonly breakers = new Map<string, CircuitBreaker>();

  constructor(
    private readonly routes: RouteTable,
    transports: readonly Transport[],
    options: RoutingPublisherOptions = {},
  ) {
    this.transports = new Map(transports.map((t) => [t.key, t]));
    for (const key of this.transports.keys()) {
      this.breakers.set(
        key,
        new CircuitBreaker(options.circuit, (change) => options.onTargetChange?.(key, change)),
      );
    }
  }

  takeRecoveredTargets(): string[] {
    return [...this.breakers].filter(([, b]) => b.takeRecovered()).map(([key]) => key);
  }

  async publish(events: readonly OutboxEvent[], context: PublishContext = {}): Promise<PublishOutcome[]> {
    const byTarget = new Map<string, OutboxEvent[]>();
    const unrouted = new Set<string>();
    // Ordered mode: an aggregate stops at its first event with no route; the
    // events after it are not sent (event id → the event that stopped them).
    const stopped = new Map<string, string>();
    const notSent = new Map<string, string>();
    for (const event of events) {
      const stoppedBy = context.ordered ? stopped.get(aggregateKey(event)) : undefined;
      if (stoppedBy !== undefined) {
        notSent.set(event.id, stoppedBy);
        continue;
      }
      const keys = this.routes.resolve(event.eventType);
      if (!keys) {
        unrouted.add(event.id);
        if (context.ordered) stopped.set(aggregateKey(event), event.id);
        continue;
      }
      for (const key of keys) {
        if (event.deliveredTargets.includes(key)) continue;
        const list = byTarget.get(key);
        if (list) list.push(event);
        else byTarget.set(key, [event]);
      }
    }

    const perTarget = new Map(
      await Promise.all(
        [...byTarget].map(async ([key, list]) => [key, await this.sendTo(key, list, context)] as const),
      ),
    );

    return events.map((event): PublishOutcome => {
      if (unrouted.has(event.id)) {
        return {
          eventId: event.id,
          ok: false,
          retryable: false,
          environment: false,
          code: 'NoRoute',
          error: `no route for event type "${event.eventType}"`,
          delivered: event.deliveredTargets,
        };
      }
      const stoppedBy = notSent.get(event.id);
      if (stoppedBy !== undefined) {
        return {
          eventId: event.id,
          ...heldBack(`not sent: event ${stoppedBy} of the same aggregate, before it, has no route`),
          delivered: event.deliveredTargets,
        };
      }
      const delivered = [...event.deliveredTargets];
      const failures: Array<FailureInfo & { key: string }> = [];
      for (const key of this.routes.resolve(event.eventType) ?? []) {
        if (event.deliveredTargets.includes(key)) continue;
        // A target that says nothing about an event has not delivered it.
        const result: TargetResult = perTarget.get(key)?.get(event.id) ?? {
          ok: false,
          retryable: true,
          environment: false,
          code: 'MissingResult',
          error: `${key}: the transport returned no result for this event`,
        };
        if (result.ok) delivered.push(key);
        else failures.push({ ...result, key });
      }
      if (failures.length === 0) return { eventId: event.id, ok: true, delivered };
      return { eventId: event.id, ok: false, ...combine(failures), delivered };
    });
  }

  /**
   * Sends one target's events. While its circuit is open and a probe is due,
   * the first event goes alone as the probe; the rest follow only if it got
   * through. While open and not due, the transport makes no calls at all.
   */
  private async sendTo(
    key: string,
    list: OutboxEvent[],
    context: PublishContext,
  ): Promise<Map<string, TargetResult>> {
    const transport = this.transports.get(key);
    if (!transport) throw new Error(`no transport for target ${key}`);
    const gate = this.breakers.get(key);
    const send = async (events: readonly OutboxEvent[]) => {
      try {
        return await transport.send(events, { ...context, gate });
      } catch (error) {
        // A transport should not throw; if one does, retry its events later.
        const failed: TargetResult = {
          ok: false,
          retryable: true,
          environment: false,
          error: `${key}: ${String(error)}`,
        };
        return new Map(events.map((e) => [e.id, failed]));
      }
    };
    if (gate?.probeDue && list.length > 1) {
      const [probe, ...rest] = list as [OutboxEvent, ...OutboxEvent[]];
      const results = await send([probe]);
      let others = rest;
      if (context.ordered && results.get(probe.id)?.ok !== true) {
        // The probe's aggregate stops at the probe.
        const key = aggregateKey(probe);
        others = rest.filter((e) => aggregateKey(e) !== key);
        for (const e of rest) {
          if (aggregateKey(e) === key) {
            results.set(
              e.id,
              heldBack(`not sent: event ${probe.id} of the same aggregate, before it, was not delivered`),
            );
          }
        }
      }
      if (others.length > 0) for (const [id, result] of await send(others)) results.set(id, result);
      return holdUntilProbe(results, gate);
    }
    return holdUntilProbe(await send(list), gate);
  }
}

/**
 * A target whose circuit is open (now, after this send) is not called again
 * before its next probe, so an event that failed there for a reason of the
 * environment waits at least that long: claimed again sooner, it would only
 * be refused again.
 */
function holdUntilProbe(
  results: Map<string, TargetResult>,
  gate: CircuitBreaker | undefined,
): Map<string, TargetResult> {
  if (!gate?.isOpen) return results;
  const holdMs = gate.retryAfterMs();
  for (const [id, result] of results) {
    if (!result.ok && result.retryable && result.environment && !result.heldBack) {
      results.set(id, { ...result, retryAfterMs: Math.max(result.retryAfterMs ?? 0, holdMs) });
    }
  }
  return results;
}

/**
 * One outcome from several targets' failures. A permanent failure decides
 * (retrying cannot make that target accept it); otherwise the event counts
 * as the environment's fault only if every failing target says so.
 */
function combine(failures: Array<FailureInfo & { key: string }>): FailureInfo {
  const permanent = failures.find((f) => !f.retryable);
  const first = permanent ?? failures.find((f) => !f.environment) ?? failures[0]!;
  const environment = !permanent && failures.every((f) => f.environment);
  const retryAfters = failures.map((f) => f.retryAfterMs ?? 0);
  return {
    retryable: !permanent,
    environment,
    heldBack: failures.every((f) => f.heldBack) || undefined,
    waitingFor: environment ? failures.map((f) => f.key) : undefined,
    code: first.code,
    error: failures.length === 1 ? first.error : failures.map((f) => `${f.key}: ${f.error}`).join('; '),
    retryAfterMs: environment ? Math.max(...retryAfters) : undefined,
  };
}

/**
 * What {@link createAwsPublisher} uses when an option is left out; the same
 * values as the relay's `OUTBOX_EVENT_SOURCE` and `OUTBOX_CONCURRENCY`.
 */
export const AWS_PUBLISHER_DEFAULTS = {
  source: 'outbox',
  concurrency: 8,
} as const;

/**
 * What the publisher needs of an AWS SDK v3 client: its `send`. Written out
 * rather than `Pick<SQSClient, 'send'>` so that the published declarations
 * name no AWS SDK type: a relay with SQS targets only type-checks without
 * @aws-sdk/client-eventbridge installed, and the other way round. An
 * `SQSClient` or `EventBridgeClient` is one.
 */
export interface AwsClient {
  send(command: object, options?: { abortSignal?: AbortSignal | undefined }): Promise<unknown>;
}

export interface AwsPublisherOptions extends RoutingPublisherOptions {
  routes: readonly RouteConfig[];
  /** Needed when a route has an SQS target. */
  sqs?: AwsClient | undefined;
  /** Needed when a route has an EventBridge target. */
  eventBridge?: AwsClient | undefined;
  /** EventBridge `Source` for targets that do not set their own. Default `outbox`. */
  source?: string | undefined;
  /** API calls in flight at once, across all targets: 1 to 256. Default 8. */
  concurrency?: number | undefined;
  /** Called once per API call. */
  onCall?: () => void;
  /**
   * Direct calls (default off): after each target's first call through the
   * client, SendMessageBatch and PutEvents go out without the SDK's
   * middleware stack, signed with the client's credentials and sent by its
   * HTTP handler to the endpoint that first call used. About half the
   * relay's CPU per event (docs/deploy.md, "Direct calls"). Leave off for a
   * client with middleware of its own (X-Ray capture, a custom retry strategy).
   */
  directCalls?: boolean | undefined;
  /**
   * The claim check: an event whose message is over its target's limit has
   * its payload stored in this S3 bucket and the message carries a pointer
   * (`payloadRef`); consumers fetch it (docs/consumer.md, "Large payloads").
   * Without it such events are dead-lettered.
   */
  largePayloads?: LargePayloadOptions | undefined;
}

const optionsSchema = z.object({
  routes: routesSchema,
  source: z.string().min(1).max(256).default(AWS_PUBLISHER_DEFAULTS.source),
  concurrency: z.int().min(1).max(256).default(AWS_PUBLISHER_DEFAULTS.concurrency),
  directCalls: z.boolean().optional(),
  largePayloads: z
    .object({
      bucket: z.string().min(1),
      prefix: z.string().optional(),
      s3: z.custom<S3Sender>(hasSend, 'expected an S3 client'),
    })
    .optional(),
});

function hasSend(value: unknown): boolean {
  return typeof (value as { send?: unknown } | null)?.send === 'function';
}

/**
 * Builds the routing publisher with SQS and EventBridge transports for every
 * configured target. Only the clients the routes use are needed: SQS-only
 * routes need no EventBridge client.
 *
 * Throws a {@link ConfigError} naming the option at fault: malformed routes,
 * one destination with conflicting settings, a missing client for a target
 * type, a `source` or `concurrency` out of range.
 *
 * @example
 * ```ts
 * import { SQSClient } from '@aws-sdk/client-sqs';
 * import { createAwsPublisher } from 'pg-lambda-outbox/relay';
 *
 * const publisher = createAwsPublisher({
 *   routes: [{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: process.env.QUEUE_URL! }] }],
 *   sqs: new SQSClient({}),
 * });
 * ```
 */
export function createAwsPublisher(options: AwsPublisherOptions): RoutingPublisher {
  const parsed = optionsSchema.safeParse(options);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const option = issue.path.length > 0 ? issue.path.map(String).join('.') : 'options';
    throw new ConfigError(option, issue.message, { cause: parsed.error });
  }
  const { source, concurrency } = parsed.data;
  const targets = new Map<string, TargetConfig>();
  for (const route of options.routes) for (const t of route.targets) targets.set(targetKey(t), t);
  const sqs = requireClient(options.sqs, 'sqs', 'SQSClient', targets, 'sqs');
  const eventBridge = requireClient(
    options.eventBridge,
    'eventBridge',
    'EventBridgeClient',
    targets,
    'eventbridge',
  );
  const limit = pLimit(concurrency);
  const schedule = <T>(call: () => Promise<T>) => limit(call);
  const payloads = options.largePayloads ? new PayloadStore(options.largePayloads) : undefined;
  const transports = [...targets].map(
    ([key, target]): Transport =>
      target.type === 'sqs'
        ? new SqsTransport({
            // Either client's send is the SDK's own; its typed form is internal.
            client: sqs as Pick<SQSClient, 'send'>,
            queueUrl: target.queueUrl,
            maxMessageBytes: target.maxMessageBytes,
            messageGroup: target.messageGroup,
            schedule,
            onCall: options.onCall,
            payloads,
            directCalls: options.directCalls,
          })
        : new EventBridgeTransport({
            client: eventBridge as Pick<EventBridgeClient, 'send'>,
            busName: target.busName,
            source: target.source ?? source,
            key,
            maxBytes: target.maxMessageBytes,
            schedule,
            onCall: options.onCall,
            payloads,
            directCalls: options.directCalls,
          }),
  );
  return new RoutingPublisher(new RouteTable(options.routes), transports, options);
}

/** The client for one target type: required when a route has such a target. */
function requireClient<C>(
  client: C | undefined,
  option: string,
  className: string,
  targets: Map<string, TargetConfig>,
  type: TargetConfig['type'],
): C | undefined {
  const first = [...targets.values()].find((t) => t.type === type);
  if (!first) return client;
  if (!hasSend(client)) {
    throw new ConfigError(
      option,
      `a route has the ${type === 'sqs' ? 'SQS' : 'EventBridge'} target ${targetKey(first)}: pass an ${className} as ${option}`,
    );
  }
  return client;
}
