/**
 * Routes and targets as the relay is configured with them (`OUTBOX_ROUTES`,
 * `routes`), validated by routesSchema (route-schemas.ts).
 */
/**
 * What a standard queue's MessageGroupId is taken from (a route's
 * `messageGroup`), for SQS fair queues: the queue tells tenants apart by
 * it, so one tenant's backlog does not hold back the others' messages.
 */
export type MessageGroupSource = 'aggregateType' | 'aggregateId' | { header: string };

export interface SqsTargetConfig {
  type: 'sqs';
  queueUrl: string;
  /**
   * Largest message (body and attributes) and call the queue accepts.
   * Default 1 MiB, what SQS accepts; lower it for a queue whose
   * MaximumMessageSize is lower, or an emulator that keeps 256 KiB.
   */
  maxMessageBytes?: number | undefined;
  /**
   * Standard queues only: send a MessageGroupId taken from the event's
   * aggregate type, aggregate id or a header, so the queue (a fair queue)
   * keeps one tenant's backlog from delaying the others. Order is not
   * kept: that is a FIFO queue's, which groups by aggregate.
   */
  messageGroup?: MessageGroupSource | undefined;
}

export interface EventBridgeTargetConfig {
  type: 'eventbridge';
  busName: string;
  /** The event's `Source`; defaults to the relay's configured source. */
  source?: string | undefined;
  /** Largest entry, and entries per PutEvents call; default 1 MiB, what EventBridge accepts. */
  maxMessageBytes?: number | undefined;
}

export type TargetConfig = SqsTargetConfig | EventBridgeTargetConfig;

export interface RouteConfig {
  /** Event type pattern(s): `*` matches any run of characters, e.g. `order.*`. */
  match: string | string[];
  targets: TargetConfig[];
}

/**
 * Stable key of a target; recorded in `delivered_targets`. Targets that differ
 * in anything that changes the message are different targets: an EventBridge
 * target with its own `source` gets its own key (and transport), so two routes
 * to one bus with different sources both publish with their own source. A bus
 * target without `source` keeps the plain `eventbridge:<bus>` key.
 */
export function targetKey(target: TargetConfig): string {
  if (target.type === 'sqs') return `sqs:${target.queueUrl}`;
  return target.source === undefined
    ? `eventbridge:${target.busName}`
    : `eventbridge:${target.busName}#source=${target.source}`;
}

/**
 * Settings that must agree wherever one destination appears: the same queue
 * URL with two different size limits is refused when the config loads rather
 * than resolved silently by whichever route comes last.
 */
export function targetConflicts(routes: readonly RouteConfig[]): string[] {
  const seen = new Map<string, { target: TargetConfig; where: string }>();
  const conflicts: string[] = [];
  routes.forEach((route, r) => {
    route.targets.forEach((target, t) => {
      const key = targetKey(target);
      const where = `routes[${r}].targets[${t}]`;
      const earlier = seen.get(key);
      if (!earlier) {
        seen.set(key, { target, where });
      } else if (JSON.stringify(sorted(earlier.target)) !== JSON.stringify(sorted(target))) {
        conflicts.push(
          `${where} and ${earlier.where} name the same destination (${key}) with different settings (${JSON.stringify(target)} vs ${JSON.stringify(earlier.target)}); give them the same settings`,
        );
      }
    });
  });
  return conflicts;
}

function sorted(target: TargetConfig): Array<[string, unknown]> {
  return Object.entries(target)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => a.localeCompare(b));
}

function patternToRegExp(pattern: string): RegExp {
  const escaped = pattern.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*');
  return new RegExp(`^${escaped}$`);
}

/** Maps event types to target keys; the first route whose pattern matches wins. */
export class RouteTable {
  private readonly compiled: Array<{ patterns: RegExp[]; keys: string[] }>;
  private readonly cache = new Map<string, string[] | undefined>();

  constructor(routes: readonly RouteConfig[]) {
    this.compiled = routes.map((route) => ({
      patterns: (Array.isArray(route.match) ? route.match : [route.match]).map(patternToRegExp),
      keys: [...new Set(route.targets.map(targetKey))],
    }));
  }

  /** Target keys for an event type, or undefined when no route matches. */
  resolve(eventType: string): string[] | undefined {
    if (!this.cache.has(eventType)) {
      const route = this.compiled.find((r) => r.patterns.some((p) => p.test(eventType)));
      this.cache.set(eventType, route?.keys);
    }
    return this.cache.get(eventType);
  }
}
