import { createHash } from 'node:crypto';
import type { GetObjectCommandOutput } from '@aws-sdk/client-s3';
import { OutboxError } from '../errors.js';
import { importOptional } from '../optional-dependency.js';
import type { S3Sender } from '../publish/claim-check.js';
import type { Envelope, PayloadRef } from '../publish/envelope.js';

/**
 * A payload the relay stored in S3 (the claim check) could not be read:
 * the object is missing, unreadable, or not what the message says (size,
 * SHA-256, JSON). The record fails and is retried by the queue (and, after
 * `maxReceiveCount` receives, moved to its dead-letter queue).
 */
export class LargePayloadError extends OutboxError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { ...options, retryable: true });
    this.name = 'LargePayloadError';
  }
}

const NOT_FOUND = new Set(['NoSuchKey', 'NotFound', 'NoSuchBucket']);

/**
 * Fetches the payload a `payloadRef` points to, checks its size and SHA-256,
 * parses it and returns the envelope with `payload` set (and `payloadRef`
 * removed): handlers see the event as if the payload had travelled inline.
 */
export async function resolvePayload(
  envelope: Envelope,
  ref: PayloadRef,
  s3: S3Sender | undefined,
  abortSignal?: AbortSignal,
): Promise<Envelope> {
  const where = `s3://${ref.s3.bucket}/${ref.s3.key}`;
  if (!s3) {
    throw new LargePayloadError(
      `the message's payload is stored in S3 (${where}) but the consumer has no S3 client: pass the consumer option s3 (the reference stack sets OUTBOX_LARGE_PAYLOAD_BUCKET)`,
    );
  }
  // Loaded here, not at import: a consumer that never sees a stored payload
  // does not need the S3 client installed.
  const { GetObjectCommand } = await importOptional(
    '@aws-sdk/client-s3',
    'the consumer option s3',
    () => import('@aws-sdk/client-s3'),
  );
  let bytes: Uint8Array;
  try {
    const response = (await s3.send(new GetObjectCommand({ Bucket: ref.s3.bucket, Key: ref.s3.key }), {
      abortSignal,
    })) as GetObjectCommandOutput;
    if (!response.Body) throw new Error('the response has no body');
    bytes = await response.Body.transformToByteArray();
  } catch (error) {
    const e = error as { name?: string; message?: string };
    if (e.name && NOT_FOUND.has(e.name)) {
      throw new LargePayloadError(
        `the payload object ${where} does not exist (${e.name}); the record will be retried`,
        { cause: error },
      );
    }
    throw new LargePayloadError(
      `reading the payload object ${where} failed: ${e.name ?? 'Error'}: ${e.message ?? String(error)}`,
      { cause: error },
    );
  }
  if (bytes.length !== ref.bytes) {
    throw new LargePayloadError(
      `the payload object ${where} is ${bytes.length} bytes, the message says ${ref.bytes}`,
    );
  }
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  if (sha256 !== ref.sha256.toLowerCase()) {
    throw new LargePayloadError(
      `the payload object ${where} has SHA-256 ${sha256}, the message says ${ref.sha256}`,
    );
  }
  let payload: unknown;
  try {
    payload = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('utf8'));
  } catch {
    throw new LargePayloadError(`the payload object ${where} is not valid JSON`);
  }
  const { payloadRef: _ref, ...rest } = envelope;
  return { ...rest, payload };
}
