import { randomUUID } from 'node:crypto';
import { ValidationError } from '../errors.js';
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  MAX_AGGREGATE_ID_LENGTH,
  MAX_AGGREGATE_TYPE_LENGTH,
  MAX_EVENT_TYPE_LENGTH,
  MAX_HEADERS_BYTES,
} from './limits.js';
import type { NewOutboxEvent } from './types.js';

export interface ValidateOptions {
  /** Maximum UTF-8 size of the serialized payload. */
  maxPayloadBytes?: number;
}

/** An event checked and serialized, ready for the INSERT. */
export interface ValidEvent {
  id: string;
  aggregateType: string;
  aggregateId: string;
  eventType: string;
  payloadJson: string;
  headersJson: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function requireText(field: string, value: unknown, max: number): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new ValidationError(field, 'must be a non-empty string');
  }
  // varchar(n) counts characters (code points), not UTF-16 units.
  const length = [...value].length;
  if (length > max) {
    throw new ValidationError(field, `must be at most ${max} characters, got ${length}`);
  }
  if (value.includes('\u0000')) {
    throw new ValidationError(field, 'must not contain NUL characters');
  }
  return value;
}

function serialize(field: string, value: unknown): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    throw new ValidationError(field, `is not JSON-serializable (${(error as Error).message})`, {
      cause: error,
    });
  }
  if (json === undefined) {
    throw new ValidationError(field, `is not JSON-serializable (got ${typeof value})`);
  }
  // PostgreSQL's jsonb cannot store \u0000; fail here with a clear message
  // rather than with a database error halfway through the caller's transaction.
  if (json.includes('\\u0000')) {
    throw new ValidationError(field, 'contains a NUL character (\\u0000), which jsonb cannot store');
  }
  return json;
}

/**
 * Checks one event against the column and broker limits and serializes it.
 * Throws {@link ValidationError} naming the field; touches no database.
 */
export function validateEvent(
  event: NewOutboxEvent,
  options: ValidateOptions = {},
  path = 'event',
): ValidEvent {
  if (event === null || typeof event !== 'object') {
    throw new ValidationError(path, 'must be an object');
  }
  const maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  const aggregateType = requireText(`${path}.aggregateType`, event.aggregateType, MAX_AGGREGATE_TYPE_LENGTH);
  const aggregateId = requireText(`${path}.aggregateId`, event.aggregateId, MAX_AGGREGATE_ID_LENGTH);
  const eventType = requireText(`${path}.eventType`, event.eventType, MAX_EVENT_TYPE_LENGTH);

  let id: string;
  if (event.id === undefined) {
    id = randomUUID();
  } else if (typeof event.id === 'string' && UUID.test(event.id)) {
    id = event.id.toLowerCase();
  } else {
    throw new ValidationError(`${path}.id`, 'must be a UUID');
  }

  const payloadJson = serialize(`${path}.payload`, event.payload);
  const payloadBytes = Buffer.byteLength(payloadJson, 'utf8');
  if (payloadBytes > maxPayloadBytes) {
    throw new ValidationError(
      `${path}.payload`,
      `is ${payloadBytes} bytes serialized, over the limit of ${maxPayloadBytes} bytes`,
    );
  }

  const headers = event.headers ?? {};
  if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) {
    throw new ValidationError(`${path}.headers`, 'must be an object of string values');
  }
  for (const [key, value] of Object.entries(headers)) {
    if (typeof value !== 'string') {
      throw new ValidationError(`${path}.headers.${key}`, 'must be a string');
    }
  }
  const headersJson = serialize(`${path}.headers`, headers);
  if (Buffer.byteLength(headersJson, 'utf8') > MAX_HEADERS_BYTES) {
    throw new ValidationError(`${path}.headers`, `must be at most ${MAX_HEADERS_BYTES} bytes serialized`);
  }

  return { id, aggregateType, aggregateId, eventType, payloadJson, headersJson };
}
