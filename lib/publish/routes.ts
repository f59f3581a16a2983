import { z } from 'zod';

export const sqsTargetSchema = z.strictObject({
  type: z.literal('sqs'),
  queueUrl: z.url(),
  /** Per-message limit of the queue (SQS allows up to 1 MiB; default 256 KiB). */
  maxMessageBytes: z
    .int()
    .min(1024)
    .max(1024 * 1024)
    .optional(),
});

export const eventBridgeTargetSchema = z.strictObject({
  type: z.literal('eventbridge'),
  busName: z.string().min(1).max(1600),
  /** The event's `Source`; defaults to the relay's configured source. */
  source: z.string().min(1).max(256).optional(),
});

export const targetSchema = z.discriminatedUnion('type', [sqsTargetSchema, eventBridgeTargetSchema]);

export const routeSchema = z.strictObject({
  /** Event type pattern(s): `*` matches any run of characters, e.g. `order.*`. */
  match: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]),
  targets: z.array(targetSchema).min(1),
});

export const routesSchema = z
  .array(routeSchema)
  .min(1)
  .superRefine((routes, ctx) => {
    for (const message of targetConflicts(routes)) ctx.addIssue({ code: 'custom', message });
  });

export type TargetConfig = z.infer<typeof targetSchema>;
export type RouteConfig = z.infer<typeof routeSchema>;

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
