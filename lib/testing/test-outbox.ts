import type { Queryable } from '../db/queryable.js';
import { resolveSchema } from '../db/schema.js';
import { ConfigError } from '../errors.js';
import type { RouteConfig } from '../publish/routes.js';
import type { RelayOptions } from '../relay/options.js';
import { Relay, type RelaySummary } from '../relay/relay.js';
import { Deliverer, type DeliverOptions, type DeliverResult, type MessageConsumer } from './deliver.js';
import { InMemoryPublisher, type PublishedMessage, type TargetFailure } from './in-memory-publisher.js';

export interface TestOutboxOptions {
  /** The database your code writes events to: a `pg.Pool` (the relay runs single statements). */
  db: Queryable;
  /**
   * The service's outbox handle (`createOutbox({ schema })`): the relay uses
   * its schema, as your code and consumers do.
   */
  outbox?: { readonly schema: string | undefined } | undefined;
  /**
   * The outbox's schema, as given to `migrate({ schema })`, when there is no
   * `outbox` handle. Default: `OUTBOX_SCHEMA`, else the `search_path`.
   */
  schema?: string | undefined;
  /** `aggregate`: the relay publishes each aggregate's events in commit order, to a FIFO queue by default. */
  ordering?: 'none' | 'aggregate' | undefined;
  /**
   * Your relay's routes (`OUTBOX_ROUTES`, or what you pass to
   * `createAwsPublisher`). Default: every event to one queue.
   */
  routes?: readonly RouteConfig[] | undefined;
  /**
   * The relay's other settings (`maxAttempts`, `backoff`, `deadLetterPolicy`,
   * ...). `workers` defaults to 1, so messages come in claim order.
   */
  relay?: Omit<RelayOptions, 'schema' | 'ordering'> | undefined;
  /** EventBridge `Source` for bus targets that set none. Default `outbox`. */
  source?: string | undefined;
  /** Longest one drain may take; a drain that runs out returns with `stoppedBecause: 'time'`. Default 30 s. */
  timeoutMs?: number | undefined;
}

/** What one drain did. */
export interface Drained {
  /** The messages the targets accepted, in the order they were sent. */
  messages: PublishedMessage[];
  /** The relay's own summary: `published`, `retried`, `deadLettered`, their event types, `stats`. */
  summary: RelaySummary;
}

/** The test kit: see {@link testOutbox}. */
export interface TestOutbox {
  /** The in-memory publisher the relay sends to. */
  readonly publisher: InMemoryPublisher;
  /** The relay, as configured (`relay.options`). */
  readonly relay: Relay;
  /**
   * Runs the relay until a claim finds nothing: every event due now is
   * published (or fails at a target set to fail). A failed event is retried
   * after its backoff, as in production: by a later drain once it is due.
   */
  drain(): Promise<Drained>;
  /**
   * Hands messages to a consumer (`createConsumer`'s result) as its Lambda
   * would get them from SQS, one `handleMessages` call per queue; bus
   * messages arrive as an EventBridge rule delivers them. The same messages
   * delivered again are redeliveries: the consumer's dedupe skips them.
   */
  deliver(
    consumer: MessageConsumer,
    messages: Drained | readonly PublishedMessage[],
    options?: DeliverOptions,
  ): Promise<DeliverResult>;
  /** Every message accepted so far; of one target (key, queue URL or bus name) when given. */
  messages(target?: string): PublishedMessage[];
  /** Makes a target refuse everything sent to it (default `unavailable`), until {@link healTarget}. */
  failTarget(target: string, failure?: TargetFailure): void;
  healTarget(target: string): void;
}

/**
 * A test kit for your own tests: the real relay (claim, publish, record
 * outcomes, retries and dead letters) over your database, publishing to an
 * in-memory publisher that keeps the exact messages SQS and EventBridge
 * would have received, and a way to feed them to your consumer. No AWS, no
 * emulator: only PostgreSQL, migrated as in production.
 *
 * @example
 * const kit = testOutbox({ db: pool, outbox }); // or { db: pool, schema: 'outbox' }
 * await placeOrder(pool, order); // your code: enqueueEvent in its transaction
 * const drained = await kit.drain();
 * expect(drained.messages.map((m) => m.envelope.type)).toEqual(['order.placed']);
 * const result = await kit.deliver(consumer, drained);
 * expect(result.processed).toBe(1);
 */
export function testOutbox(options: TestOutboxOptions): TestOutbox {
  const { outbox } = options;
  if (outbox !== undefined && options.schema !== undefined && options.schema !== outbox.schema) {
    throw new ConfigError(
      'schema',
      `differs from the outbox handle's schema ${JSON.stringify(outbox.schema ?? null)}: give one of them`,
    );
  }
  const schema = resolveSchema(outbox !== undefined ? outbox.schema : options.schema);
  const publisher = new InMemoryPublisher({
    routes: options.routes,
    fifo: options.ordering === 'aggregate',
    source: options.source,
  });
  const relay = new Relay({
    db: options.db,
    publisher,
    options: { workers: 1, ...options.relay, schema, ordering: options.ordering },
  });
  const deliverer = new Deliverer();
  const timeoutMs = options.timeoutMs ?? 30_000;
  return {
    publisher,
    relay,
    async drain() {
      const before = publisher.messages().length;
      const deadline = Date.now() + timeoutMs;
      const summary = await relay.run({
        remainingMs: () => relay.options.safetyMarginMs + deadline - Date.now(),
        stopWhenIdle: true,
      });
      return { messages: publisher.messages().slice(before), summary };
    },
    deliver(consumer, messages, deliverOptions) {
      const list = 'messages' in messages ? messages.messages : messages;
      return deliverer.deliver(consumer, list, deliverOptions);
    },
    messages: (target) => publisher.messages(target),
    failTarget: (target, failure) => publisher.failTarget(target, failure),
    healTarget: (target) => publisher.healTarget(target),
  };
}
