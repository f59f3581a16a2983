import { EVENTBRIDGE_MAX_ENTRY_BYTES, SQS_MAX_MESSAGE_BYTES } from '../publish/limits.js';

/**
 * Sizes fixed by the brokers. SQS and EventBridge both accept 1 MiB per
 * message since 2026-01-29 (lib/publish/limits.ts; SQS counts the body and
 * the message attributes, EventBridge Source, DetailType and Detail). The
 * write API checks the exact message the transports will send against this
 * limit (`maxMessageBytes` lowers it, for a target configured lower).
 */
export const BROKER_MESSAGE_MAX_BYTES = Math.min(SQS_MAX_MESSAGE_BYTES, EVENTBRIDGE_MAX_ENTRY_BYTES);

/**
 * Default payload limit of the write API with `largePayloads` (the relay
 * stores payloads too large for a message in S3).
 */
export const LARGE_PAYLOAD_MAX_BYTES = 10 * 1024 * 1024;

/**
 * Most bytes of payloads and headers one call writes. A call is one
 * statement (see below), and each of its array parameters is sent as one
 * text value, which PostgreSQL caps at 1 GB; quoting inside the array
 * literal can double JSON's size, so a quarter of that.
 */
export const ENQUEUE_CALL_MAX_BYTES = 256 * 1024 * 1024;

/** Maximum serialized size of an event's headers. */
export const MAX_HEADERS_BYTES = 4 * 1024;

/** Column limits of `outbox_events` (characters). */
export const MAX_AGGREGATE_TYPE_LENGTH = 255;
export const MAX_AGGREGATE_ID_LENGTH = 255;
/** EventBridge's DetailType limit; the event type becomes the DetailType. */
export const MAX_EVENT_TYPE_LENGTH = 128;

/**
 * EventBridge's `Source` is at most 256 characters (and so the relay's config
 * allows); as UTF-8 that is at most 768 bytes (a character outside the BMP
 * takes two of the 256 UTF-16 units for its 4 bytes).
 */
export const MAX_EVENT_SOURCE_BYTES = 256 * 3;

/**
 * PutEvents "will only process nested JSON up to 1000 levels deep" (API
 * reference, PutEvents; older SDK docs say 1100, we take the lower figure).
 * The payload sits inside the envelope (Detail), which EventBridge places in
 * the event it matches rules against, so two levels are taken already.
 */
export const MAX_PAYLOAD_DEPTH = 1000 - 2;

/**
 * PutEvents accepts JSON integers from -9,223,372,036,854,775,808 to
 * 9,223,372,036,854,775,807. 2^63 is exactly representable as a double; every
 * double at or beyond ±2^63 is an integer that is published out of that range
 * (the relay publishes PostgreSQL's text of the number, never an exponent form,
 * and -2^63 as a double prints as -9223372036854776000).
 */
export const INT64_BOUND = 2 ** 63;

/** Most dead letters one redrive resets; larger backlogs take several calls. */
export const MAX_REDRIVE_LIMIT = 10_000;
export const DEFAULT_REDRIVE_LIMIT = 100;
