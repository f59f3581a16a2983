import http from 'node:http';
import https from 'node:https';

/**
 * The HTTP exchange of a direct call (direct-calls.ts) on the client's own
 * connections, without the HTTP handler's per-request machinery.
 *
 * The SDK's Node handler (`@smithy/node-http-handler`) arms up to five timers
 * per request, wraps the response in a stream that a collector then drains,
 * and copies the headers twice; for a relay that sends a batch of 10 events
 * per call, that was about a sixth of its CPU per event. Here one request
 * goes out on the same agent (so the client's keep-alive connections, and a
 * proxy agent given to the client, still carry it) with the same limits,
 * read from the handler's resolved config after the client's first call:
 *
 * - `connectionTimeout`: a new connection not established within it fails
 *   (`TimeoutError`);
 * - `requestTimeout`, with `throwOnRequestTimeout` (as the relay sets it):
 *   the whole exchange, body included, must end within it, else
 *   `TimeoutError` (the handler's own limit ends at the response's headers;
 *   this one is stricter). Without `throwOnRequestTimeout` the handler only
 *   warns, and so nothing here;
 * - `socketTimeout` (else the service's default): a socket idle that long
 *   fails (`TimeoutError`);
 * - the call's abort signal (the relay's deadline) ends it (`AbortError`).
 *
 * A connection that closes before the response is complete fails with
 * `ECONNRESET`. The errors carry the names and codes the relay's
 * classification reads (aws-errors.ts), the same as the handler's.
 *
 * A client whose handler is not that Node handler (another handler, a
 * handler whose config has no agent) keeps its handler: {@link plainHttpOf}
 * answers undefined.
 */

/** What is read from the Node handler's resolved config. */
export interface PlainHttp {
  httpAgent?: http.Agent | undefined;
  httpsAgent?: https.Agent | undefined;
  connectionTimeout?: number | undefined;
  requestTimeout?: number | undefined;
  throwOnRequestTimeout?: boolean | undefined;
  socketTimeout?: number | undefined;
  /** The service's default socket timeout, when the client sets none. */
  defaultSocketTimeout?: number | undefined;
}

/** The request to send, signed. */
export interface PlainRequest {
  protocol: string;
  hostname: string;
  port?: number | undefined;
  path: string;
  headers: Record<string, string>;
}

export interface PlainResponse {
  statusCode: number;
  headers: Record<string, string>;
  text: string;
}

/**
 * The Node handler's connections and limits, once it has resolved its config
 * (after the client's first call); undefined for any other handler.
 */
export function plainHttpOf(handler: unknown, protocol: string): PlainHttp | undefined {
  const h = handler as { metadata?: { handlerProtocol?: unknown }; config?: unknown } | undefined;
  if (h?.metadata?.handlerProtocol !== 'http/1.1') return undefined;
  const config = h.config as PlainHttp | undefined;
  if (!config || typeof config !== 'object') return undefined;
  const agent = protocol === 'https:' ? config.httpsAgent : config.httpAgent;
  const Agent = protocol === 'https:' ? https.Agent : http.Agent;
  return agent instanceof Agent ? config : undefined;
}

function timeoutError(message: string): Error {
  return Object.assign(new Error(message), { name: 'TimeoutError', code: 'ETIMEDOUT' });
}

function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  const error = new Error(reason instanceof Error ? 'Request aborted' : String(reason ?? 'Request aborted'));
  error.name = 'AbortError';
  if (reason instanceof Error) error.cause = reason;
  return error;
}

function flatHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) flat[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return flat;
}

/** One POST of `body`, its whole answer read as text (any status). */
export function plainPost(
  config: PlainHttp,
  request: PlainRequest,
  body: string,
  abortSignal: AbortSignal | undefined,
): Promise<PlainResponse> {
  return new Promise((resolve, reject) => {
    if (abortSignal?.aborted) {
      reject(abortError(abortSignal));
      return;
    }
    const ssl = request.protocol === 'https:';
    let settled = false;
    let connectTimer: NodeJS.Timeout | undefined;
    let requestTimer: NodeJS.Timeout | undefined;
    const settle = (error: Error | undefined, response?: PlainResponse) => {
      if (settled) return;
      settled = true;
      clearTimeout(connectTimer);
      clearTimeout(requestTimer);
      abortSignal?.removeEventListener('abort', onAbort);
      if (error) reject(error);
      else resolve(response as PlainResponse);
    };
    // [::1] in a URL, ::1 to connect to.
    const host = request.hostname.startsWith('[') ? request.hostname.slice(1, -1) : request.hostname;
    const req = (ssl ? https : http).request({
      host,
      port: request.port,
      method: 'POST',
      path: request.path,
      headers: request.headers,
      agent: ssl ? config.httpsAgent : config.httpAgent,
    });
    // Only while unsettled: once the answer is read, the socket is back in
    // the agent's pool and may already carry another call.
    const fail = (error: Error) => {
      if (settled) return;
      settle(error);
      req.destroy();
    };
    const onAbort = () => fail(abortError(abortSignal as AbortSignal));
    abortSignal?.addEventListener('abort', onAbort, { once: true });
    const connectMs = config.connectionTimeout;
    if (connectMs) {
      req.once('socket', (socket) => {
        if (!socket.connecting) return;
        connectTimer = setTimeout(
          () =>
            fail(timeoutError(`no connection to ${host} within the connection timeout of ${connectMs} ms`)),
          connectMs,
        );
        socket.once('connect', () => clearTimeout(connectTimer));
      });
    }
    const requestMs = config.requestTimeout;
    if (requestMs && config.throwOnRequestTimeout) {
      requestTimer = setTimeout(
        () =>
          fail(timeoutError(`no complete answer from ${host} within the request timeout of ${requestMs} ms`)),
        requestMs,
      );
    }
    const socketMs = config.socketTimeout ?? config.defaultSocketTimeout;
    if (socketMs && socketMs > 0 && Number.isFinite(socketMs)) {
      req.setTimeout(socketMs, () =>
        fail(timeoutError(`the connection to ${host} was idle for the socket timeout of ${socketMs} ms`)),
      );
    }
    req.on('error', (error) => settle(error));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () =>
        settle(undefined, {
          statusCode: res.statusCode ?? -1,
          headers: flatHeaders(res.headers),
          text: Buffer.concat(chunks).toString('utf8'),
        }),
      );
      res.on('error', (error) => settle(error));
      res.on('close', () => {
        if (!res.complete) {
          fail(
            Object.assign(new Error(`the connection to ${host} closed before the answer was complete`), {
              code: 'ECONNRESET',
            }),
          );
        }
      });
    });
    req.end(body);
  });
}
