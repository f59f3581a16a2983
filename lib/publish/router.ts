import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import type { SQSClient } from '@aws-sdk/client-sqs';
import pLimit from 'p-limit';
import type { OutboxEvent } from '../outbox/types.js';
import { EventBridgeTransport } from './eventbridge-transport.js';
import { type RouteConfig, RouteTable, type TargetConfig, targetKey } from './routes.js';
import { SqsTransport } from './sqs-transport.js';
import type { Publisher, PublishOutcome, TargetResult, Transport } from './types.js';

/**
 * Sends each event to every target its route names, skipping targets that
 * accepted it on an earlier attempt. An event is published only when all its
 * targets accepted it; an event with no route fails permanently.
 */
export class RoutingPublisher implements Publisher {
  private readonly transports: Map<string, Transport>;

  constructor(
    private readonly routes: RouteTable,
    transports: readonly Transport[],
  ) {
    this.transports = new Map(transports.map((t) => [t.key, t]));
  }

  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    const byTarget = new Map<string, OutboxEvent[]>();
    const unrouted = new Set<string>();
    for (const event of events) {
      const keys = this.routes.resolve(event.eventType);
      if (!keys) {
        unrouted.add(event.id);
        continue;
      }
      for (const key of keys) {
        if (event.deliveredTargets.includes(key)) continue;
        const list = byTarget.get(key);
        if (list) list.push(event);
        else byTarget.set(key, [event]);
      }
    }

    const perTarget = await Promise.all(
      [...byTarget].map(async ([key, list]) => {
        const transport = this.transports.get(key);
        if (!transport) throw new Error(`no transport for target ${key}`);
        try {
          return [key, await transport.send(list)] as const;
        } catch (error) {
          // A transport should not throw; if one does, retry its events later.
          const failed: TargetResult = { ok: false, retryable: true, error: `${key}: ${String(error)}` };
          return [key, new Map(list.map((e) => [e.id, failed]))] as const;
        }
      }),
    );

    return events.map((event): PublishOutcome => {
      if (unrouted.has(event.id)) {
        return {
          eventId: event.id,
          ok: false,
          retryable: false,
          code: 'NoRoute',
          error: `no route for event type "${event.eventType}"`,
          delivered: event.deliveredTargets,
        };
      }
      const delivered = [...event.deliveredTargets];
      const failures: Array<TargetResult & { ok: false; key: string }> = [];
      for (const [key, results] of perTarget) {
        const result = results.get(event.id);
        if (!result) continue;
        if (result.ok) delivered.push(key);
        else failures.push({ ...result, key });
      }
      if (failures.length === 0) return { eventId: event.id, ok: true, delivered };
      // One permanent failure is enough: retrying cannot make that target accept it.
      const permanent = failures.find((f) => !f.retryable);
      const first = permanent ?? failures[0]!;
      return {
        eventId: event.id,
        ok: false,
        retryable: !permanent,
        code: first.code,
        error: failures.length === 1 ? first.error : failures.map((f) => `${f.key}: ${f.error}`).join('; '),
        delivered,
      };
    });
  }
}

export interface AwsPublisherOptions {
  routes: readonly RouteConfig[];
  sqs: Pick<SQSClient, 'send'>;
  eventBridge: Pick<EventBridgeClient, 'send'>;
  /** EventBridge `Source` for targets that do not set their own. */
  source: string;
  /** API calls in flight at once, across all targets. */
  concurrency: number;
  /** Called once per API call. */
  onCall?: () => void;
}

/** Builds the routing publisher with SQS and EventBridge transports for every configured target. */
export function createAwsPublisher(options: AwsPublisherOptions): RoutingPublisher {
  const limit = pLimit(options.concurrency);
  const schedule = <T>(call: () => Promise<T>) => limit(call);
  const targets = new Map<string, TargetConfig>();
  for (const route of options.routes) for (const t of route.targets) targets.set(targetKey(t), t);
  const transports = [...targets.values()].map(
    (target): Transport =>
      target.type === 'sqs'
        ? new SqsTransport({
            client: options.sqs,
            queueUrl: target.queueUrl,
            maxMessageBytes: target.maxMessageBytes,
            schedule,
            onCall: options.onCall,
          })
        : new EventBridgeTransport({
            client: options.eventBridge,
            busName: target.busName,
            source: target.source ?? options.source,
            schedule,
            onCall: options.onCall,
          }),
  );
  return new RoutingPublisher(new RouteTable(options.routes), transports);
}
