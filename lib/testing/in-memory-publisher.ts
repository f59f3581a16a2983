import { randomUUID } from 'node:crypto';
import { ConfigError } from '../errors.js';
import type { OutboxEvent } from '../outbox/types.js';
import { buildFailure } from '../publish/batching.js';
import type { Envelope } from '../publish/envelope.js';
import { eventBridgeMessage, sqsMessage } from '../publish/messages.js';
import { routesSchema } from '../publish/route-schemas.js';
import { AWS_PUBLISHER_DEFAULTS, RoutingPublisher } from '../publish/router.js';
import { type RouteConfig, RouteTable, type TargetConfig, targetKey } from '../publish/routes.js';
import type { PublishContext, Publisher, PublishOutcome, TargetResult, Transport } from '../publish/types.js';

/**
 * A `SendMessageBatch` entry as the relay sends it (without its `Id`). The
 * SDK's fields, written out so that this entry point needs no AWS package.
 */
export interface SqsEntry {
  MessageBody: string;
  /** `eventId`, `eventType`, `aggregateType`, `aggregateId`; `traceparent` and `replayId` when set. */
  MessageAttributes: Record<string, { DataType: string; StringValue: string }>;
  /** `AWSTraceHeader`, when the event carries trace context. */
  MessageSystemAttributes?: Record<string, { DataType: string; StringValue: string }>;
  /** FIFO queues: `<aggregate type>:<aggregate id>`. */
  MessageGroupId?: string;
  /** FIFO queues: the event id (`<event id>:<replay id>` for a replay). */
  MessageDeduplicationId?: string;
}

/** A `PutEvents` entry as the relay sends it. */
export interface EventBridgeEntry {
  EventBusName: string;
  Source: string;
  DetailType: string;
  /** The envelope's JSON text. */
  Detail: string;
  TraceHeader?: string;
}

interface Captured {
  /** The id SQS (or, for a bus, EventBridge) would have given the message. */
  messageId: string;
  /** The target's key, as stored in `delivered_targets`: `sqs:<queue url>`, `eventbridge:<bus>`. */
  target: string;
  /** The envelope the message carries, parsed: what a consumer's handler gets as its event. */
  envelope: Envelope;
  /** When it was sent (epoch ms). */
  sentAt: number;
}

/** One message a target accepted: the entry the real transport would have sent, and its envelope. */
export type PublishedMessage =
  | (Captured & { type: 'sqs'; queueUrl: string; entry: SqsEntry })
  | (Captured & { type: 'eventbridge'; busName: string; entry: EventBridgeEntry });

/**
 * How a target refuses what is sent to it:
 * - `retryable`: an error of the event (attempts are spent; dead-lettered
 *   after the relay's `maxAttempts`);
 * - `permanent`: the target rejects the event (dead-lettered at once);
 * - `unavailable`: the environment is at fault (outage, throttling, access
 *   denied): retried without spending attempts, dead-lettered only past the
 *   relay's `maxPendingAgeMs`.
 */
export type TargetFailure = 'retryable' | 'permanent' | 'unavailable';

const FAILURES: Record<TargetFailure, { retryable: boolean; environment: boolean; code: string }> = {
  retryable: { retryable: true, environment: false, code: 'TestFailure' },
  permanent: { retryable: false, environment: false, code: 'TestRejected' },
  unavailable: { retryable: true, environment: true, code: 'TestUnavailable' },
};

/** Records what one target accepts, building each entry with the relay's own message builders. */
class InMemoryTransport implements Transport {
  readonly key: string;
  /** The queue URL or bus name. */
  readonly name: string;
  failure: TargetFailure | undefined;

  constructor(
    private readonly target: TargetConfig,
    private readonly source: string,
    private readonly sent: PublishedMessage[],
  ) {
    this.key = targetKey(target);
    this.name = target.type === 'sqs' ? target.queueUrl : target.busName;
  }

  async send(events: readonly OutboxEvent[]): Promise<Map<string, TargetResult>> {
    const results = new Map<string, TargetResult>();
    for (const event of events) {
      if (this.failure) {
        const { code, ...kind } = FAILURES[this.failure];
        const error = `${this.key}: ${this.failure} failure set by failTarget`;
        results.set(event.id, { ok: false, ...kind, code, error });
        continue;
      }
      try {
        this.sent.push(this.build(event));
        results.set(event.id, { ok: true });
      } catch (error) {
        // A row that cannot become a message fails as it does at a real target.
        results.set(event.id, buildFailure(error));
      }
    }
    return results;
  }

  private build(event: OutboxEvent): PublishedMessage {
    const common = { target: this.key, messageId: randomUUID(), sentAt: Date.now() };
    if (this.target.type === 'sqs') {
      const { queueUrl } = this.target;
      const entry = sqsMessage(event, { fifo: queueUrl.endsWith('.fifo') }).entry as SqsEntry;
      return { ...common, type: 'sqs', queueUrl, entry, envelope: JSON.parse(entry.MessageBody) };
    }
    const { busName } = this.target;
    const source = this.target.source ?? this.source;
    const entry = eventBridgeMessage(event, { busName, source }).entry as EventBridgeEntry;
    return { ...common, type: 'eventbridge', busName, entry, envelope: JSON.parse(entry.Detail) };
  }
}

/** Every event to one standard queue; `routes` of `InMemoryPublisher` replace it. */
export const DEFAULT_TEST_QUEUE_URL = 'https://sqs.us-east-1.amazonaws.com/000000000000/outbox-test';

export interface InMemoryPublisherOptions {
  /**
   * The relay's routes, as given to `createAwsPublisher` (no client is
   * needed for any target). Default: every event to one queue,
   * {@link DEFAULT_TEST_QUEUE_URL} (with `.fifo` when `fifo` is set).
   */
  routes?: readonly RouteConfig[] | undefined;
  /** With the default route: a FIFO queue (group and deduplication ids), as ordered relays use. */
  fifo?: boolean | undefined;
  /** EventBridge `Source` for bus targets that set none. Default `outbox`. */
  source?: string | undefined;
}

/**
 * A `Publisher` that sends nothing: each target records the messages it
 * accepts, built exactly as the SQS and EventBridge transports build them,
 * and routed by the relay's own routing (an event with no route fails
 * permanently; a retry skips targets that already accepted it). A target set
 * to fail with {@link failTarget} refuses everything sent to it until
 * {@link healTarget}. No AWS client, no emulator.
 *
 * @example
 * const publisher = new InMemoryPublisher();
 * await new Relay({ db: pool, publisher }).run({ remainingMs: () => 30_000, stopWhenIdle: true });
 * publisher.messages().map((m) => m.envelope.type); // ['order.placed']
 */
export class InMemoryPublisher implements Publisher {
  /** The routes in use (the default route when none were given). */
  readonly routes: readonly RouteConfig[];
  private readonly sent: PublishedMessage[] = [];
  private readonly transports: InMemoryTransport[];
  private readonly router: RoutingPublisher;

  constructor(options: InMemoryPublisherOptions = {}) {
    const queueUrl = options.fifo ? `${DEFAULT_TEST_QUEUE_URL}.fifo` : DEFAULT_TEST_QUEUE_URL;
    const parsed = routesSchema.safeParse(
      options.routes ?? [{ match: '*', targets: [{ type: 'sqs', queueUrl }] }],
    );
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new ConfigError(['routes', ...issue.path].join('.'), issue.message, { cause: parsed.error });
    }
    this.routes = parsed.data;
    const targets = new Map(this.routes.flatMap((r) => r.targets).map((t) => [targetKey(t), t]));
    const source = options.source ?? AWS_PUBLISHER_DEFAULTS.source;
    this.transports = [...targets.values()].map((t) => new InMemoryTransport(t, source, this.sent));
    this.router = new RoutingPublisher(new RouteTable(this.routes), this.transports);
  }

  publish(events: readonly OutboxEvent[], context?: PublishContext): Promise<PublishOutcome[]> {
    return this.router.publish(events, context);
  }

  /**
   * The messages accepted so far, in the order they were sent; of one
   * target only when `target` is given (its key, queue URL or bus name).
   */
  messages(target?: string): PublishedMessage[] {
    if (target === undefined) return [...this.sent];
    const key = this.transport(target).key;
    return this.sent.filter((m) => m.target === key);
  }

  /** Makes a target (its key, queue URL or bus name) refuse everything sent to it. */
  failTarget(target: string, failure: TargetFailure = 'unavailable'): void {
    if (!(failure in FAILURES)) {
      throw new ConfigError(
        'failure',
        `expected ${Object.keys(FAILURES).join(', ')} (got ${String(failure)})`,
      );
    }
    this.transport(target).failure = failure;
  }

  /** Makes a failed target accept messages again. */
  healTarget(target: string): void {
    this.transport(target).failure = undefined;
  }

  private transport(target: string): InMemoryTransport {
    const found = this.transports.find((t) => t.key === target || t.name === target);
    if (!found) {
      const known = this.transports.map((t) => t.key).join(', ');
      throw new ConfigError('target', `no route has the target "${target}" (targets: ${known})`);
    }
    return found;
  }
}
