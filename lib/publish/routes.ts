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

export const routesSchema = z.array(routeSchema).min(1);

export type TargetConfig = z.infer<typeof targetSchema>;
export type RouteConfig = z.infer<typeof routeSchema>;

/** Stable key of a target; recorded in `delivered_targets`. */
export function targetKey(target: TargetConfig): string {
  return target.type === 'sqs' ? `sqs:${target.queueUrl}` : `eventbridge:${target.busName}`;
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
