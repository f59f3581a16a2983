/**
 * The zod schemas of routes and targets (routes.ts has their types, which
 * the public declarations use: they never name zod). `satisfies` keeps the
 * two in step.
 */
import * as z from '../zod.js';
import { EVENTBRIDGE_MAX_ENTRY_BYTES, MIN_MESSAGE_BYTES, SQS_MAX_MESSAGE_BYTES } from './limits.js';
import { type RouteConfig, type TargetConfig, targetConflicts } from './routes.js';

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

/** Where a standard queue's MessageGroupId comes from (fair queues). */
const messageGroupSchema = z.union(
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

const sqsTargetSchema = z
  .strictObject({
    type: z.literal('sqs'),
    queueUrl: z.url(),
    maxMessageBytes: maxBytes(SQS_MAX_MESSAGE_BYTES),
    messageGroup: messageGroupSchema.optional(),
  })
  .refine((t) => t.messageGroup === undefined || !t.queueUrl.endsWith('.fifo'), {
    path: ['messageGroup'],
    error:
      'is for standard queues (fair queues); a FIFO queue (.fifo) already groups by aggregate to keep its order: remove messageGroup',
  });

const eventBridgeTargetSchema = z.strictObject({
  type: z.literal('eventbridge'),
  busName: z.string().min(1).max(1600),
  source: z.string().min(1).max(256).optional(),
  maxMessageBytes: maxBytes(EVENTBRIDGE_MAX_ENTRY_BYTES),
});

const targetSchema = z.discriminatedUnion('type', [
  sqsTargetSchema,
  eventBridgeTargetSchema,
]) satisfies z.ZodType<TargetConfig>;

const routeSchema = z.strictObject({
  match: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]),
  targets: z.array(targetSchema).min(1),
}) satisfies z.ZodType<RouteConfig>;

export const routesSchema = z
  .array(routeSchema)
  .min(1)
  .superRefine((routes, ctx) => {
    for (const message of targetConflicts(routes)) ctx.addIssue({ code: 'custom', message });
  });
