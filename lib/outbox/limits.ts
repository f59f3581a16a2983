/**
 * Sizes fixed by the brokers. SQS and EventBridge both accept 256 KiB per
 * message (SQS also counts message attributes; EventBridge counts Source,
 * DetailType and Detail). The event's payload and headers travel inside an
 * envelope, so the default payload limit leaves room for the envelope.
 */
export const BROKER_MESSAGE_MAX_BYTES = 256 * 1024;

/** Default maximum serialized payload: 256 KiB less 8 KiB for envelope and headers. */
export const DEFAULT_MAX_PAYLOAD_BYTES = BROKER_MESSAGE_MAX_BYTES - 8 * 1024;

/** Maximum serialized size of an event's headers. */
export const MAX_HEADERS_BYTES = 4 * 1024;

/** Column limits of `outbox_events` (characters). */
export const MAX_AGGREGATE_TYPE_LENGTH = 255;
export const MAX_AGGREGATE_ID_LENGTH = 255;
/** EventBridge's DetailType limit; the event type becomes the DetailType. */
export const MAX_EVENT_TYPE_LENGTH = 128;
