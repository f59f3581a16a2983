import type { Pool } from 'pg';
import { type Env, readVar } from '../config/env.js';
import { boolVar, intVar } from '../config/vars.js';
import { resolveSchema } from '../db/schema.js';
import { ConfigError } from '../errors.js';
import { type OutboxLogger, silentLogger } from '../observer.js';
import { LARGE_PAYLOAD_MAX_BYTES } from '../outbox/limits.js';
import type { S3Sender } from '../publish/claim-check.js';
import type { EventHandler, HandlerMap } from './handlers.js';

export interface ConsumerOptions<Events extends Record<string, unknown> = Record<string, unknown>> {
  /**
   * The dedupe scope, stored in `processed_events.consumer` (at most 255
   * characters). Two consumers with different names each handle every event
   * once; keep the name stable across deployments or events are handled again.
   */
  name: string;
  /** Each record gets its own transaction on a connection from this pool. */
  pool: Pool;
  /** Handler per event type. */
  handlers: HandlerMap<Events>;
  /**
   * Runs for event types with no handler. Without one, such records fail as
   * malformed (and end in the dead-letter queue). Pass `async () => {}` to
   * acknowledge and ignore them (they still get a dedupe row).
   */
  fallback?: EventHandler | undefined;
  logger?: OutboxLogger | undefined;
  /**
   * Records are not started when less than this many milliseconds of the
   * invocation remain (see `remainingMs` of `handleSqsEvent`); they are given
   * back to the queue instead of being cut off by the Lambda timeout, which
   * would fail the whole batch. A started record's statements are cut off
   * this long before the end, so the invocation can still report the batch.
   * Default 2000.
   */
  safetyMarginMs?: number | undefined;
  /**
   * What to do with a replay (a message an operator republished, carrying
   * `replayId`). `skip` (the default): deduplicate it like any redelivery, so
   * an event this consumer already handled is skipped as a duplicate (one it
   * never handled is handled, as a first delivery). `handle`: handle each
   * replay of an event once more, deduplicated per replay id
   * (`processed_event_replays`). Handlers see `context.replay` either way.
   */
  replays?: 'skip' | 'handle' | undefined;
  /**
   * Reads payloads the relay stored in S3 because they were too large for a
   * message (`payloadRef`, docs/consumer.md "Large payloads"): fetched and
   * checked (size, SHA-256) before the record's transaction, so handlers get
   * `event.payload` as usual; an event already processed is skipped without
   * a fetch. Only the relay's bucket and the event's own key
   * (`<prefix>/<event id>`) are ever fetched, and only objects of at most
   * `maxBytes`: a message pointing elsewhere fails its record. Without it
   * such a record fails (and is retried).
   */
  largePayloads?: ConsumerLargePayloadOptions | undefined;
  /**
   * The schema of the dedupe tables (`processed_events`,
   * `processed_event_replays`), as given to `migrate({ schema })`. Default:
   * the `outbox` handle's, else the `OUTBOX_SCHEMA` environment variable,
   * else unqualified names, found through the connection's `search_path`.
   */
  schema?: string | undefined;
  /**
   * The service's outbox handle (`createOutbox({ schema })` of
   * `pg-lambda-outbox`): the consumer uses its schema, said once for the
   * whole service. Given together with `schema`, the two must agree.
   */
  outbox?: { readonly schema: string | undefined } | undefined;
  /**
   * Whether log lines name the event's `aggregate_id`. Off by default: where
   * aggregate ids are personal data (an e-mail address as a customer id),
   * they must not reach the logs. Default: the `OUTBOX_LOG_AGGREGATE_ID`
   * environment variable (`true` turns it on), else false.
   */
  logAggregateId?: boolean | undefined;
}

/** Where the relay stores large payloads (its `largePayloads`), and the client to read them. */
export interface ConsumerLargePayloadOptions {
  /** The relay's bucket (the reference stack's `OUTBOX_LARGE_PAYLOAD_BUCKET`). */
  bucket: string;
  /** The relay's key prefix, without a trailing slash. Default `payloads`. */
  prefix?: string | undefined;
  /**
   * Largest object read, in bytes. Default: what the function's memory
   * holds ({@link payloadBytesForMemory}, from
   * `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`: 5.3 MiB at 256 MB, 10 MiB from 368
   * MB), or 10 MiB (`LARGE_PAYLOAD_MAX_BYTES`, the producer's default limit)
   * outside Lambda.
   */
  maxBytes?: number | undefined;
  s3: S3Sender;
}

export interface ResolvedLargePayloads {
  bucket: string;
  prefix: string;
  maxBytes: number;
  s3: S3Sender;
}

export interface ResolvedConsumerOptions {
  name: string;
  pool: Pool;
  handlers: ReadonlyMap<string, EventHandler>;
  fallback: EventHandler | undefined;
  logger: OutboxLogger;
  safetyMarginMs: number;
  replays: 'skip' | 'handle';
  largePayloads: ResolvedLargePayloads | undefined;
  schema: string | undefined;
  logAggregateId: boolean;
}

const KNOWN_OPTIONS = new Set([
  'name',
  'pool',
  'handlers',
  'fallback',
  'logger',
  'safetyMarginMs',
  'replays',
  'largePayloads',
  'schema',
  'outbox',
  'logAggregateId',
]);

/** Validates the options (unknown keys are refused: a typo must not pass silently) and applies defaults. */
export function resolveConsumerOptions<Events extends Record<string, unknown>>(
  options: ConsumerOptions<Events>,
  env: Env = process.env,
): ResolvedConsumerOptions {
  for (const key of Object.keys(options)) {
    if (key === 's3') {
      throw new ConfigError(
        's3',
        "replaced by largePayloads: { bucket, prefix?, s3 } (the relay's bucket and prefix)",
      );
    }
    if (!KNOWN_OPTIONS.has(key)) throw new ConfigError(key, `unknown consumer option`);
  }
  const {
    name,
    pool,
    handlers,
    fallback,
    logger,
    safetyMarginMs,
    replays,
    largePayloads,
    schema,
    outbox,
    logAggregateId,
  } = options;
  if (typeof name !== 'string' || name.trim() === '' || [...name].length > 255) {
    throw new ConfigError('name', 'expected a non-empty consumer name of at most 255 characters');
  }
  if (!pool || typeof pool.connect !== 'function') {
    throw new ConfigError('pool', 'expected a pg.Pool');
  }
  if (typeof handlers !== 'object' || handlers === null) {
    throw new ConfigError('handlers', 'expected an object of handlers by event type');
  }
  // A Map of own entries: a lookup of an event type such as "constructor"
  // must not find Object.prototype's.
  const byType = new Map<string, EventHandler>();
  for (const [type, handler] of Object.entries(handlers)) {
    if (typeof handler !== 'function') {
      throw new ConfigError(`handlers.${type}`, 'expected a function (event, tx, context) => Promise<void>');
    }
    byType.set(type, handler as EventHandler);
  }
  if (fallback !== undefined && typeof fallback !== 'function') {
    throw new ConfigError('fallback', 'expected a function (event, tx, context) => Promise<void>');
  }
  if (byType.size === 0 && fallback === undefined) {
    throw new ConfigError('handlers', 'expected at least one handler or a fallback');
  }
  const margin = safetyMarginMs ?? 2000;
  if (!Number.isFinite(margin) || margin < 0) {
    throw new ConfigError('safetyMarginMs', 'expected a number of milliseconds >= 0');
  }
  if (replays !== undefined && replays !== 'skip' && replays !== 'handle') {
    throw new ConfigError('replays', `expected 'skip' or 'handle' (got ${JSON.stringify(replays)})`);
  }
  if (outbox !== undefined && (typeof outbox !== 'object' || outbox === null || !('schema' in outbox))) {
    throw new ConfigError('outbox', "expected the service's outbox handle (createOutbox({ schema }))");
  }
  if (outbox !== undefined && schema !== undefined && schema !== outbox.schema) {
    throw new ConfigError(
      'schema',
      `${JSON.stringify(schema)} differs from the outbox handle's schema ${JSON.stringify(outbox.schema ?? null)}: give one of them`,
    );
  }
  if (logAggregateId !== undefined && typeof logAggregateId !== 'boolean') {
    throw new ConfigError('logAggregateId', 'expected true or false');
  }
  return {
    name,
    pool,
    handlers: byType,
    fallback,
    logger: logger ?? silentLogger,
    safetyMarginMs: margin,
    replays: replays ?? 'skip',
    largePayloads: resolveLargePayloads(largePayloads, env),
    schema: resolveSchema(outbox !== undefined ? outbox.schema : schema, env),
    logAggregateId: logAggregateId ?? readVar(env, 'OUTBOX_LOG_AGGREGATE_ID', boolVar) ?? false,
  };
}

const MIB = 1024 * 1024;

/**
 * The default largest payload a consumer of `memoryMb` reads from S3: what
 * is left after the runtime (128 MB) over 24, between 1 MiB and 10 MiB
 * (`LARGE_PAYLOAD_MAX_BYTES`). Parsed JSON takes far more memory than its
 * text: a 10 MiB payload of empty objects (`[{},{},...]`) took 186 MB of
 * heap, about 18 times its size, and the download, its copy and the text
 * come on top; an out-of-memory crash would fail the whole batch. 256 MB:
 * 5.3 MiB; 368 MB and more: 10 MiB. Unknown memory (outside Lambda): 10 MiB.
 */
export function payloadBytesForMemory(memoryMb: number | undefined): number {
  if (memoryMb === undefined) return LARGE_PAYLOAD_MAX_BYTES;
  const fits = Math.floor(((memoryMb - 128) * MIB) / 24);
  return Math.min(LARGE_PAYLOAD_MAX_BYTES, Math.max(MIB, fits));
}

function resolveLargePayloads(
  options: ConsumerLargePayloadOptions | undefined,
  env: Env,
): ResolvedLargePayloads | undefined {
  if (options === undefined) return undefined;
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError('largePayloads', 'expected { bucket, prefix?, maxBytes?, s3 }');
  }
  for (const key of Object.keys(options)) {
    if (!['bucket', 'prefix', 'maxBytes', 's3'].includes(key)) {
      throw new ConfigError(`largePayloads.${key}`, 'unknown option');
    }
  }
  const { bucket, prefix, maxBytes, s3 } = options;
  if (typeof bucket !== 'string' || bucket.trim() === '') {
    throw new ConfigError(
      'largePayloads.bucket',
      'expected the name of the bucket the relay stores payloads in',
    );
  }
  if (prefix !== undefined && typeof prefix !== 'string') {
    throw new ConfigError('largePayloads.prefix', 'expected a key prefix (a string)');
  }
  const max =
    maxBytes ?? payloadBytesForMemory(readVar(env, 'AWS_LAMBDA_FUNCTION_MEMORY_SIZE', intVar(128, 10_240)));
  if (!Number.isSafeInteger(max) || max <= 0) {
    throw new ConfigError('largePayloads.maxBytes', `expected a number of bytes > 0 (got ${maxBytes})`);
  }
  if (typeof (s3 as { send?: unknown } | undefined)?.send !== 'function') {
    throw new ConfigError('largePayloads.s3', 'expected an S3Client (an object with send)');
  }
  // The same normalisation as the relay's PayloadStore, so the keys agree.
  return { bucket, prefix: (prefix ?? 'payloads').replace(/\/+$/, ''), maxBytes: max, s3 };
}
