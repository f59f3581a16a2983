import { createHash } from 'node:crypto';
import { optionalImportOnce } from '../optional-dependency.js';
import type { OutboxEvent } from '../outbox/types.js';
import { guardedCall, payloadStoreFailure } from './batching.js';
import type { PayloadRef } from './envelope.js';
import { compactJson, compactJsonBuffer } from './messages.js';
import type { SendContext, TargetResult } from './types.js';

/** The S3 client's command classes, loaded at the first stored payload. */
const loadS3 = optionalImportOnce('@aws-sdk/client-s3', 'largePayloads', () => import('@aws-sdk/client-s3'));

/**
 * What the claim check needs of an S3 client: its `send`. Written out rather
 * than `Pick<S3Client, 'send'>` so that the published declarations name no
 * AWS SDK type: a consumer or relay that never stores a payload type-checks
 * without @aws-sdk/client-s3 installed. An `S3Client` is one.
 */
export interface S3Sender {
  send(command: object, options?: { abortSignal?: AbortSignal | undefined }): Promise<unknown>;
}

/**
 * The claim-check pattern: a payload too large for a target's message is
 * stored in S3 and the message carries a pointer to it (`payloadRef`)
 * instead. The object's key is `<prefix>/<event id>`, so a retried or
 * replayed event overwrites the same object with the same bytes (the payload
 * of a row never changes): the PUT is idempotent.
 */
export interface LargePayloadOptions {
  /** Where payloads go, e.g. the reference stack's `OUTBOX_LARGE_PAYLOAD_BUCKET`. */
  bucket: string;
  /** Key prefix, without a trailing slash. Default `payloads`. */
  prefix?: string | undefined;
  s3: S3Sender;
}

/** The payload text the relay publishes (the committed text, compacted). */
export function payloadText(event: Pick<OutboxEvent, 'payload' | 'payloadJson'>): string {
  return event.payloadJson === undefined ? JSON.stringify(event.payload) : compactJson(event.payloadJson);
}

/**
 * Stores payloads in S3, once per event even when several targets of one
 * publish need it (the first PUT in flight is shared). Failures are thrown to
 * the caller (the transport), which classifies them like its own calls.
 */
export class PayloadStore {
  readonly bucket: string;
  private readonly prefix: string;
  private readonly inFlight = new Map<string, Promise<PayloadRef>>();

  constructor(private readonly options: LargePayloadOptions) {
    this.bucket = options.bucket;
    this.prefix = (options.prefix ?? 'payloads').replace(/\/+$/, '');
  }

  keyFor(eventId: string): string {
    return this.prefix === '' ? eventId : `${this.prefix}/${eventId}`;
  }

  /**
   * PUTs the event's payload (unless a PUT of the same event is already in
   * flight) and returns the pointer. `run` wraps the call (the transport's
   * concurrency limit and deadline).
   */
  store(
    event: Pick<OutboxEvent, 'id' | 'payload' | 'payloadJson'>,
    run: <T>(call: (abortSignal: AbortSignal | undefined) => Promise<T>) => Promise<T>,
  ): Promise<PayloadRef> {
    const pending = this.inFlight.get(event.id);
    if (pending) return pending;
    const promise = (async () => {
      const { PutObjectCommand } = await loadS3();
      const body =
        event.payloadJson === undefined
          ? Buffer.from(JSON.stringify(event.payload), 'utf8')
          : compactJsonBuffer(event.payloadJson);
      const ref: PayloadRef = {
        s3: { bucket: this.bucket, key: this.keyFor(event.id) },
        bytes: body.length,
        sha256: createHash('sha256').update(body).digest('hex'),
      };
      await run((abortSignal) =>
        this.options.s3.send(
          new PutObjectCommand({
            Bucket: ref.s3.bucket,
            Key: ref.s3.key,
            Body: body,
            ContentType: 'application/json',
            ContentLength: body.length,
          }),
          { abortSignal },
        ),
      );
      return ref;
    })();
    this.inFlight.set(event.id, promise);
    const forget = () => this.inFlight.delete(event.id);
    promise.then(forget, forget);
    return promise;
  }
}

/**
 * Stores the payloads of `events` (messages too large for their target) and
 * returns their pointers. An event whose PUT failed gets its failure in
 * `results` and no pointer. Each PUT runs under `schedule` (the calls in
 * flight limit) and the publish deadline; it does not count towards the
 * target's circuit breaker.
 */
async function storePayloads(
  events: readonly OutboxEvent[],
  store: PayloadStore,
  schedule: <T>(call: () => Promise<T>) => Promise<T>,
  context: SendContext,
  results: Map<string, TargetResult>,
): Promise<Map<string, PayloadRef>> {
  const refs = new Map<string, PayloadRef>();
  const run = <T>(call: (abortSignal: AbortSignal | undefined) => Promise<T>) =>
    schedule(() => guardedCall({ signal: context.signal }, call));
  await Promise.all(
    events.map(async (event) => {
      try {
        refs.set(event.id, await store.store(event, run));
      } catch (error) {
        results.set(event.id, payloadStoreFailure(error, context));
      }
    }),
  );
  return refs;
}

/** Why an oversize message fails when no bucket is configured. */
export const NO_BUCKET_HINT =
  "; large payloads can go through S3: set OUTBOX_LARGE_PAYLOAD_BUCKET (the publisher's largePayloads option)";

/**
 * The claim check within one target's send: stores the payloads of the
 * events found too large for the target and prepares each of them again,
 * this time with its pointer. Nothing to do without a store or such events.
 */
export async function prepareWithPointers(
  oversize: readonly OutboxEvent[],
  store: PayloadStore | undefined,
  schedule: (<T>(call: () => Promise<T>) => Promise<T>) | undefined,
  context: SendContext,
  results: Map<string, TargetResult>,
  prepare: (event: OutboxEvent, payloadRef: PayloadRef) => void,
): Promise<void> {
  if (!store || oversize.length === 0) return;
  const refs = await storePayloads(oversize, store, schedule ?? ((call) => call()), context, results);
  for (const event of oversize) {
    const ref = refs.get(event.id);
    if (ref) prepare(event, ref);
  }
}
