import { createHash } from 'node:crypto';
import type { GetObjectCommandOutput } from '@aws-sdk/client-s3';
import { OutboxError } from '../errors.js';
import { optionalImportOnce } from '../optional-dependency.js';
import type { Envelope, PayloadRef } from '../publish/envelope.js';
import type { ResolvedLargePayloads } from './options.js';

const loadS3 = optionalImportOnce(
  '@aws-sdk/client-s3',
  'the consumer option largePayloads',
  () => import('@aws-sdk/client-s3'),
);

/**
 * A payload the relay stored in S3 (the claim check) could not be read:
 * the object is missing, unreadable, or not what the message says (size,
 * SHA-256, JSON). The record fails and is retried by the queue (and, after
 * `maxReceiveCount` receives, moved to its dead-letter queue).
 */
export class LargePayloadError extends OutboxError {
  constructor(message: string, options: { cause?: unknown; retryable?: boolean } = {}) {
    super(message, { retryable: true, ...options });
    this.name = 'LargePayloadError';
  }
}

const NOT_FOUND = new Set(['NoSuchKey', 'NotFound', 'NoSuchBucket']);

/**
 * Fetches the payload a `payloadRef` points to, checks its size and SHA-256,
 * parses it and returns the envelope with `payload` set (and `payloadRef`
 * removed): handlers see the event as if the payload had travelled inline.
 *
 * The pointer comes from the message, so anyone who can send to the queue
 * writes it. Only the relay's bucket and the event's own key are fetched
 * (a pointer elsewhere would make the consumer read, with its role, an
 * object it was never meant to), and no object larger than `maxBytes`: the
 * size is checked on the pointer, on the response's Content-Length and while
 * reading, never after a whole download.
 */
export async function resolvePayload(
  envelope: Envelope,
  ref: PayloadRef,
  config: ResolvedLargePayloads | undefined,
  abortSignal?: AbortSignal,
): Promise<Envelope> {
  const where = `s3://${ref.s3.bucket}/${ref.s3.key}`;
  if (!config) {
    throw new LargePayloadError(
      `the message's payload is stored in S3 (${where}) but the consumer has no largePayloads option: pass largePayloads: { bucket, s3 } (the reference stack sets OUTBOX_LARGE_PAYLOAD_BUCKET)`,
    );
  }
  const key = config.prefix === '' ? envelope.id : `${config.prefix}/${envelope.id}`;
  if (ref.s3.bucket !== config.bucket || ref.s3.key !== key) {
    throw new LargePayloadError(
      `the message points at ${where}, but the payload of event ${envelope.id} can only be s3://${config.bucket}/${key}: not fetched (a forged or misrouted message)`,
      { retryable: false },
    );
  }
  if (ref.bytes > config.maxBytes) {
    throw new LargePayloadError(
      `the payload object ${where} is ${ref.bytes} bytes by the message, over the consumer's largePayloads.maxBytes (${config.maxBytes}): not fetched`,
      { retryable: false },
    );
  }
  // Loaded here, not at import: a consumer that never sees a stored payload
  // does not need the S3 client installed.
  const { GetObjectCommand } = await loadS3();
  let bytes: Uint8Array;
  try {
    const response = (await config.s3.send(new GetObjectCommand({ Bucket: config.bucket, Key: key }), {
      abortSignal,
    })) as GetObjectCommandOutput;
    if (!response.Body) throw new Error('the response has no body');
    if (response.ContentLength !== undefined && response.ContentLength !== ref.bytes) {
      discard(response.Body);
      throw new LargePayloadError(
        `the payload object ${where} is ${response.ContentLength} bytes, the message says ${ref.bytes}`,
      );
    }
    bytes = await readAtMost(response.Body, ref.bytes, where);
  } catch (error) {
    if (error instanceof LargePayloadError) throw error;
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

type Body = NonNullable<GetObjectCommandOutput['Body']>;

/** Stops a body nobody will read, so its connection is not left half-read. */
function discard(body: Body): void {
  (body as { destroy?: () => void }).destroy?.();
}

/**
 * The body's bytes, refusing (and abandoning the download) once it has more
 * than `limit`: a body longer than its pointer says is never held whole.
 */
async function readAtMost(body: Body, limit: number, where: string): Promise<Uint8Array> {
  if (!(Symbol.asyncIterator in (body as object))) return body.transformToByteArray();
  const chunks: Uint8Array[] = [];
  let length = 0;
  for await (const chunk of body as AsyncIterable<Uint8Array>) {
    length += chunk.length;
    if (length > limit) {
      discard(body);
      throw new LargePayloadError(
        `the payload object ${where} has more than the ${limit} bytes the message says`,
      );
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, length);
}
