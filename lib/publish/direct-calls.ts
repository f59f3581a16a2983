import { importOptional } from '../optional-dependency.js';
import { classifyCallError } from './aws-errors.js';
import { type PlainHttp, plainHttpOf, plainPost } from './direct-http.js';
import { type SdkSigner, SigV4Signer, signsLikeSdk } from './sigv4.js';

/**
 * Direct calls: the relay's two hot API calls (SQS SendMessageBatch,
 * EventBridge PutEvents) sent without the SDK's per-call middleware stack.
 *
 * The SDK decides where a call goes and how it is signed: the first call of
 * a target is made through the client as usual, and the request it sent
 * (endpoint, headers, signing region and service) is kept. Later calls are
 * that request with a new JSON body, signed with SigV4 (sigv4.ts, checked
 * once against the SDK's own signer, `@smithy/signature-v4`, which signs
 * instead if the two differ) with the client's credentials provider and
 * clock offset, and sent on the client's own connections (its agent,
 * proxy and timeouts; direct-http.ts). What is skipped is the rest of the stack: schema
 * serialization, endpoint rules, user-agent building and the retry
 * middleware; one retry loop here takes the client's `maxAttempts`.
 *
 * Measured (bench/db-cost.ts, `cpu_ms_per_1000`): the relay's CPU per event
 * drops by about half. A client with middleware of its own (X-Ray capture, a
 * custom retry strategy) keeps it only on the first call: leave direct calls
 * off for such a client. Where the set-up fails (`@smithy/signature-v4`
 * cannot be loaded), the client stays on the SDK, with one process warning.
 */

/** What a direct call needs of an SDK v3 client: `send` for the first call, and its resolved config. */
export interface DirectCapableClient {
  send(command: never, options?: { abortSignal?: AbortSignal | undefined }): Promise<unknown>;
  config: unknown;
}

/** The parts of an SDK v3 client's resolved config a direct call uses. */
interface ResolvedConfig {
  credentials: () => Promise<{
    accessKeyId: string;
    secretAccessKey: string;
    sessionToken?: string;
    expiration?: Date;
  }>;
  requestHandler: {
    handle(
      request: HttpRequestLike,
      options?: { abortSignal?: AbortSignal | undefined },
    ): Promise<{ response: HttpResponseLike }>;
  };
  streamCollector: (body: unknown) => Promise<Uint8Array>;
  sha256: new (secret?: unknown) => unknown;
  maxAttempts?: () => Promise<number>;
  systemClockOffset?: number;
}

interface HttpRequestLike {
  method: string;
  protocol: string;
  hostname: string;
  port?: number | undefined;
  path: string;
  query: Record<string, string | string[] | null>;
  headers: Record<string, string>;
  body?: unknown;
}

interface HttpResponseLike {
  statusCode: number;
  headers: Record<string, string>;
  body?: unknown;
}

/** A command as the SDK's `send` takes it, with a middleware stack to watch the request on. */
interface CommandLike {
  middlewareStack: { add(middleware: never, options: never): void };
}

type Middleware = (
  next: (args: { request: unknown }) => Promise<unknown>,
) => (args: { request: unknown }) => Promise<unknown>;

/** The request the SDK sent, kept to send again with another body. */
interface Kept {
  request: Omit<HttpRequestLike, 'body'>;
  /** The request's headers, signed: by sigv4.ts, or by the SDK's signer when the two disagreed. */
  sign(headers: Record<string, string>, body: string, signingDate: Date): Promise<Record<string, string>>;
  /** The Node handler's connections and limits (direct-http.ts); undefined: the client's handler sends. */
  http: PlainHttp | undefined;
}

/** Headers the SDK sets per call: recomputed for each direct call, never copied. */
const PER_CALL_HEADERS = new Set([
  'authorization',
  'x-amz-date',
  'x-amz-security-token',
  'x-amz-content-sha256',
  'content-length',
  'amz-sdk-invocation-id',
  'amz-sdk-request',
  'x-amzn-trace-id',
]);

/** `AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request, …` */
const SIGV4_SCOPE = /^AWS4-HMAC-SHA256 Credential=[^/]+\/\d{8}\/([^/]+)\/([^/]+)\/aws4_request,/;

type SignerModule = Pick<typeof import('@smithy/signature-v4'), 'SignatureV4'>;

const loadSdkSigner = (): Promise<SignerModule> =>
  importOptional('@smithy/signature-v4', 'direct calls', () => import('@smithy/signature-v4'));

let loadSigner: () => Promise<SignerModule> = loadSdkSigner;
let fallbackWarned = false;

/**
 * Replaces the import of the SDK's signer by direct callers (`load` stands
 * for `import('@smithy/signature-v4')`), until the returned function
 * restores the package's own. A seam for tests: a loader that throws stands
 * for a layout the package cannot be loaded from (pnpm's strict
 * node_modules, a bundle built without it). It also forgets that the
 * fallback warning was given, so the next failed set-up warns again.
 */
export function useSignerLoader(load: () => Promise<SignerModule>): () => void {
  loadSigner = () => importOptional('@smithy/signature-v4', 'direct calls', load);
  fallbackWarned = false;
  return () => {
    loadSigner = loadSdkSigner;
    fallbackWarned = false;
  };
}

/**
 * Once per process: a caller could not set its direct calls up and sends
 * every call through the SDK. The transports have no logger of their own;
 * a process warning reaches stderr (CloudWatch Logs in Lambda), as the
 * relay's other set-up warnings do.
 */
function warnFallback(error: unknown): void {
  if (fallbackWarned) return;
  fallbackWarned = true;
  const reason = error instanceof Error ? error.message : String(error);
  process.emitWarning(
    `direct calls are off (OUTBOX_DIRECT_CALLS / directCalls): setting them up failed (${reason}); every SendMessageBatch and PutEvents goes through the SDK, as without direct calls. Install @smithy/signature-v4 where the relay can load it (bundle it) to have them.`,
    { code: 'OUTBOX_DIRECT_CALLS_OFF' },
  );
}

/** An AWS error answered over HTTP, shaped as the SDK shapes its service exceptions. */
export class DirectCallError extends Error {
  readonly $fault: 'client' | 'server';
  readonly $metadata: { httpStatusCode: number; requestId?: string | undefined };
  /** The query-compatible code (SQS's `x-amzn-query-error`), when the service sends one. */
  readonly Code?: string | undefined;
  /** The answer's Date moved the client's clock offset by minutes: signed again, the call may pass. */
  clockSkewCorrected = false;

  constructor(name: string, message: string, status: number, requestId?: string, code?: string) {
    super(message);
    this.name = name;
    this.$fault = status >= 500 ? 'server' : 'client';
    this.$metadata = { httpStatusCode: status, requestId };
    if (code) this.Code = code;
  }
}

/** `com.amazonaws.sqs#QueueDoesNotExist` or `QueueDoesNotExist:http://…` → `QueueDoesNotExist`. */
function errorName(type: string): string {
  const afterHash = type.slice(type.lastIndexOf('#') + 1);
  const colon = afterHash.indexOf(':');
  return colon === -1 ? afterHash : afterHash.slice(0, colon);
}

function header(headers: Record<string, string>, name: string): string | undefined {
  const direct = headers[name];
  if (direct !== undefined) return direct;
  for (const [key, value] of Object.entries(headers)) if (key.toLowerCase() === name) return value;
  return undefined;
}

function errorFrom(response: HttpResponseLike, text: string): DirectCallError {
  let body: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed && typeof parsed === 'object') body = parsed as Record<string, unknown>;
  } catch {
    // Not JSON (a proxy's error page): the status says enough.
  }
  const type =
    (typeof body.__type === 'string' && body.__type) ||
    (typeof body.code === 'string' && body.code) ||
    header(response.headers, 'x-amzn-errortype') ||
    `Http${response.statusCode}`;
  const message =
    (typeof body.message === 'string' && body.message) ||
    (typeof body.Message === 'string' && body.Message) ||
    `HTTP ${response.statusCode}${text ? `: ${text.slice(0, 200)}` : ''}`;
  const queryError = header(response.headers, 'x-amzn-query-error')?.split(';')[0];
  return new DirectCallError(
    errorName(type),
    message,
    response.statusCode,
    header(response.headers, 'x-amzn-requestid'),
    queryError,
  );
}

/**
 * The SDK's clock-skew correction, on a refused call: the answer's Date sets
 * the client's clock offset (`systemClockOffset`, which later calls, direct
 * or not, sign with). True when that moved it by 4 minutes or more, the
 * SDK's threshold for signing again at once.
 */
function correctClockSkew(config: ResolvedConfig, response: HttpResponseLike, sentAt: number): boolean {
  const date = header(response.headers, 'date');
  if (!date || header(response.headers, 'age') !== undefined) return false;
  const serverTime = Date.parse(date);
  const receivedAt = Date.now();
  if (Number.isNaN(serverTime) || receivedAt - sentAt > 900_000) return false;
  const before = config.systemClockOffset ?? 0;
  const offset = serverTime - receivedAt;
  config.systemClockOffset = offset;
  return Math.abs(offset) >= 240_000 && offset !== before;
}

/** Waits `ms`, or less if the signal aborts. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Backoff before retry `attempt` (1, 2, …): full jitter, as the SDK's standard strategy. */
function retryDelayMs(attempt: number, throttled: boolean): number {
  const base = throttled ? 500 : 100;
  return Math.random() * Math.min(20_000, base * 2 ** (attempt - 1));
}

/**
 * One API operation of one client, called directly after its first call.
 * `T` is the operation's output, which the JSON protocols answer with the
 * same member names the SDK returns.
 */
export class DirectCaller<T> {
  private kept: Kept | undefined;
  /**
   * Set once a first call showed a request this class cannot replay (not
   * SigV4), or setting it up failed (the signer could not be loaded): the
   * SDK keeps every call.
   */
  private sdkOnly = false;

  constructor(private readonly client: DirectCapableClient) {}

  /** True once calls go out directly (after a first call through the SDK). */
  get direct(): boolean {
    return this.kept !== undefined;
  }

  async send(command: () => CommandLike, input: object, abortSignal?: AbortSignal): Promise<T> {
    const kept = this.kept;
    if (!kept) return this.firstCall(command(), abortSignal);
    const config = this.client.config as ResolvedConfig;
    const maxAttempts = (await config.maxAttempts?.()) ?? 3;
    const body = JSON.stringify(input);
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.callOnce(kept, config, body, abortSignal);
      } catch (error) {
        const failure = classifyCallError(error);
        const transient =
          failure.kind === 'network' ||
          failure.kind === 'throttled' ||
          failure.kind === 'server' ||
          (error instanceof DirectCallError && error.clockSkewCorrected);
        if (!transient || attempt >= maxAttempts || abortSignal?.aborted) throw error;
        await pause(retryDelayMs(attempt, failure.kind === 'throttled'), abortSignal);
        if (abortSignal?.aborted) throw error;
      }
    }
  }

  private async callOnce(
    kept: Kept,
    config: ResolvedConfig,
    body: string,
    abortSignal: AbortSignal | undefined,
  ): Promise<T> {
    const headers: Record<string, string> = {
      ...kept.request.headers,
      'content-length': String(Buffer.byteLength(body)),
    };
    // The SDK's recursion detection: a Lambda function passes its trace id on.
    const traceId = process.env._X_AMZN_TRACE_ID;
    if (traceId && process.env.AWS_LAMBDA_FUNCTION_NAME) headers['x-amzn-trace-id'] = traceId;
    const signed: HttpRequestLike = {
      ...kept.request,
      headers: await kept.sign(headers, body, new Date(Date.now() + (config.systemClockOffset ?? 0))),
      body,
    };
    const sentAt = Date.now();
    let response: HttpResponseLike;
    let text: string;
    if (kept.http) {
      const plain = await plainPost(kept.http, signed, body, abortSignal);
      response = plain;
      text = plain.text;
    } else {
      response = (await config.requestHandler.handle(signed, { abortSignal })).response;
      const bytes =
        response.body === undefined ? new Uint8Array() : await config.streamCollector(response.body);
      text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
    }
    if (response.statusCode < 200 || response.statusCode > 299) {
      const error = errorFrom(response, text);
      error.clockSkewCorrected = correctClockSkew(config, response, sentAt);
      throw error;
    }
    return (text ? JSON.parse(text) : {}) as T;
  }

  /** The call through the SDK, keeping the request it sends. */
  private async firstCall(command: CommandLike, abortSignal: AbortSignal | undefined): Promise<T> {
    let sent: HttpRequestLike | undefined;
    if (!this.sdkOnly) {
      const keepRequest: Middleware = (next) => async (args) => {
        sent = args.request as HttpRequestLike;
        return next(args);
      };
      // Innermost: the request as signed and sent.
      command.middlewareStack.add(
        keepRequest as never,
        { step: 'deserialize', priority: 'low', name: 'outboxDirectCallsKeepRequest' } as never,
      );
    }
    const output = (await this.client.send(command as never, { abortSignal })) as T;
    if (sent && !this.kept && !this.sdkOnly) {
      // The call went out and was answered: its output is the batch's true
      // outcome, whatever happens to the set-up. A set-up that fails (the
      // signer cannot be loaded, a client unlike the SDK's) is not retried:
      // it would fail on every call, and reporting this output as failed
      // would republish delivered events until they were dead-lettered.
      // This client stays on the SDK for good.
      try {
        await this.keep(sent);
      } catch (error) {
        this.sdkOnly = true;
        warnFallback(error);
      }
    }
    return output;
  }

  private async keep(sent: HttpRequestLike): Promise<void> {
    const scope = SIGV4_SCOPE.exec(header(sent.headers, 'authorization') ?? '');
    if (!scope || sent.method !== 'POST' || Object.keys(sent.query ?? {}).length > 0) {
      this.sdkOnly = true;
      return;
    }
    const config = this.client.config as ResolvedConfig;
    const { SignatureV4 } = await loadSigner();
    if (this.sdkOnly || this.kept) return;
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(sent.headers)) {
      if (!PER_CALL_HEADERS.has(name.toLowerCase())) headers[name] = value;
    }
    const request = {
      method: sent.method,
      protocol: sent.protocol,
      hostname: sent.hostname,
      port: sent.port,
      path: sent.path,
      query: {},
      headers,
    };
    const region = scope[1] as string;
    const service = scope[2] as string;
    const sdkSigner = new SignatureV4({
      credentials: config.credentials,
      region,
      service,
      sha256: config.sha256 as never,
    }) as unknown as SdkSigner;
    const fast = new SigV4Signer({ credentials: config.credentials, region, service, path: sent.path });
    // The fast signer only once it signed this request as the SDK's signer does.
    const probe = '{"probe":"direct calls compare signers"}';
    const same = await signsLikeSdk(
      fast,
      sdkSigner,
      {
        ...request,
        headers: { ...headers, 'content-length': String(Buffer.byteLength(probe)) },
        body: probe,
      },
      new Date(),
    ).catch(() => false);
    this.kept = {
      request,
      sign: same
        ? (h, body, signingDate) =>
            fast.sign({ method: request.method, path: request.path, headers: h, body }, signingDate)
        : async (h, body, signingDate) =>
            (await sdkSigner.sign({ ...request, headers: h, body }, { signingDate })).headers,
      http: plainHttpOf(config.requestHandler, sent.protocol),
    };
  }
}
