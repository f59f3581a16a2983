/**
 * What SQS and EventBridge accept today, the default limits of every target
 * (a route's `maxMessageBytes` lowers them, e.g. for a queue whose
 * MaximumMessageSize is set lower, or an emulator that keeps the old limit).
 * An event whose message is over its target's limit goes through the claim
 * check (S3) when one is configured, else it is dead-lettered.
 *
 * AWS raised both from 256 KiB to 1 MiB ("More room to build: serverless
 * services now support payloads up to 1 MB", AWS Compute Blog, 2026-01-29):
 * - SQS SendMessageBatch: "The maximum allowed individual message size and
 *   the maximum total payload size (the sum of the individual lengths of all
 *   of the batched messages) are both 1 MiB 1,048,576 bytes"; a queue's
 *   MaximumMessageSize is 1,024 to 1,048,576 bytes, default 1,048,576.
 * - EventBridge PutEvents: "the total entry size must be less than 1MB",
 *   counted as eventBridgeEntrySize() does; read as 1 MiB, as 256KB was
 *   read as 262,144 bytes before.
 */
export const SQS_MAX_MESSAGE_BYTES = 1024 * 1024;

/** See {@link SQS_MAX_MESSAGE_BYTES}: per entry and per PutEvents call. */
export const EVENTBRIDGE_MAX_ENTRY_BYTES = 1024 * 1024;

/** The lowest limit a target may set: SQS's lowest MaximumMessageSize. */
export const MIN_MESSAGE_BYTES = 1024;

/** MessageGroupId: at most 128 characters (SQS message quotas). */
export const MAX_MESSAGE_GROUP_ID_LENGTH = 128;
