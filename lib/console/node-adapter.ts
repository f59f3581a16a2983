import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { failure, MAX_BODY_BYTES } from './http.js';

/**
 * node:http in front of a web-standard handler: each IncomingMessage
 * becomes a `Request` (its body read up to {@link MAX_BODY_BYTES}, else
 * 413), the `Response` is written back. The URL is built on `origin` (the
 * server's own address) from the request's path only, so a Host header or
 * an absolute request target never decides where the URL points; the Host
 * header is passed on for the guard to check.
 */
export function requestListener(
  handler: (request: Request) => Promise<Response>,
  origin: string,
  onError: (error: unknown) => void = () => {},
): RequestListener {
  return (req, res) => {
    respond(req, res, handler, origin).catch((error) => {
      onError(error);
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":"internal error"}');
    });
  };
}

async function respond(
  req: IncomingMessage,
  res: ServerResponse,
  handler: (request: Request) => Promise<Response>,
  origin: string,
): Promise<void> {
  const request = await toRequest(req, origin);
  const response = request instanceof Response ? request : await handler(request);
  await writeResponse(res, response, req.method === 'HEAD');
}

/** The web `Request` of a node:http request, or the `Response` that refuses it. */
export async function toRequest(req: IncomingMessage, origin: string): Promise<Request | Response> {
  const target = req.url ?? '/';
  if (!target.startsWith('/')) return failure(400, 'expected a path as the request target');
  const headers = new Headers();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    headers.append(req.rawHeaders[i] as string, req.rawHeaders[i + 1] as string);
  }
  const method = req.method ?? 'GET';
  let body: Buffer | undefined;
  if (method !== 'GET' && method !== 'HEAD') {
    body = await readBody(req);
    if (body === undefined) return failure(413, `body over ${MAX_BODY_BYTES} bytes`);
  }
  return new Request(new URL(target, origin), { method, headers, body });
}

/** The body, or undefined once it passes the limit (the rest is drained, not kept). */
function readBody(req: IncomingMessage): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on('end', () => resolve(size > MAX_BODY_BYTES ? undefined : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** Writes a web `Response` (status, headers, each Set-Cookie on its own, body) to node:http. */
export async function writeResponse(res: ServerResponse, response: Response, head = false): Promise<void> {
  const headers: Record<string, string | string[]> = {};
  response.headers.forEach((value, key) => {
    if (key !== 'set-cookie') headers[key] = value;
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) headers['set-cookie'] = cookies;
  const body = head || response.body === null ? undefined : Buffer.from(await response.arrayBuffer());
  res.writeHead(response.status, headers);
  res.end(body);
}
