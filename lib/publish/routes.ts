import { z } from 'zod';
import { EVENTBRIDGE_MAX_ENTRY_BYTES, MIN_MESSAGE_BYTES, SQS_MAX_MESSAGE_BYTES } from './limits.js';

/** A target's message size limit: SQS's range; the default is what AWS accepts (limits.ts). */
const maxBytes = (most: number) =>
  z
    .int(`expected a whole number of bytes from ${MIN_MESSAGE_BYTES} to ${most}`)
    .min(MIN_MESSAGE_BYTES, `expected a whole number of bytes from ${MIN_MESSAGE_BYTES} to ${most}`)
    .max(most, `expected a whole number of bytes from ${MIN_MESSAGE_BYTES} to ${most}`)
    .optional();

/** Header names are the producer's; as long as a header may be (write API: 4 KiB in all). */
const MAX_HEADER_NAME_LENGTH = 256;

const MESSAGE_GROUP_HELP =
  'expected \'aggregateType\', \'aggregateId\' or { "header": "<header name>" } (the MessageGroupId of a standard queue, for fair queues)';

const HEADER_HELP = `expected the name of an event header, 1 to ${MAX_HEADER_NAME_LENGTH} characters`;

/** Where a standard queue's MessageGroupId comes from (fair queues); see {@link MessageGroupSource}. */
export const messageGroupSchema = z.union(
  [
    z.enum(['aggregateType', 'aggregateId']),
    z.strictObject(
      {
        header: z.string(HEADER_HELP).min(1, HEADER_HELP).max(MAX_HEADER_NAME_LENGTH, HEADER_HELP),
      },
      { error: MESSAGE_GROUP_HELP },
    ),
  ],
  { error: MESSAGE_GROUP_HELP },
);

export const sqsTargetSchema = z
  .strictObject({
    type: z.literal('sqs'),
    queueUrl: z.url(),
    /**
     * Largest message (body and attributes) and call the queue accepts.
     * Default 1 MiB, what SQS accepts; lower it for a queue whose
     * MaximumMessageSize is lower, or an emulator that keeps 256 KiB.
     */
    maxMessageBytes: maxBytes(SQS_MAX_MESSAGE_BYTES),
    /**
     * Standard queues only: send a MessageGroupId taken from the event's
     * aggregate type, aggregate id or a header, so the queue (a fair queue)
     * keeps one tenant's backlog from delaying the others. Order is not
     * kept: that is a FIFO queue's, which groups by aggregate.
     */
    messageGroup: messageGroupSchema.optional(),
  })
  .refine((t) => t.messageGroup === undefined || !t.queueUrl.endsWith('.fifo'), {
    path: ['messageGroup'],
    error:
      'is for standard queues (fair queues); a FIFO queue (.fifo) already groups by aggregate to keep its order: remove messageGroup',
  });

export const eventBridgeTargetSchema = z.strictObject({
  type: z.literal('eventbridge'),
  busName: z.string().min(1).max(1600),
  /** The event's `Source`; defaults to the relay's configured source. */
  source: z.string().min(1).max(256).optional(),
  /** Largest entry, and entries per PutEvents call; default 1 MiB, what EventBridge accepts. */
  maxMessageBytes: maxBytes(EVENTBRIDGE_MAX_ENTRY_BYTES),
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
