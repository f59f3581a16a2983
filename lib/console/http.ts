import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * Headers on every console response: nothing cached (pages hold operational
 * data), no type sniffing, no framing, no Referer (a URL may carry the token).
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
};

/** Most bytes of a request body the console reads (a list of 10,000 ids is about 400 kB). */
export const MAX_BODY_BYTES = 1024 * 1024;

/** A JSON response with the console's headers. */
export function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: {
      'content-type': 'application/json; charset=utf-8',
      'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
      ...SECURITY_HEADERS,
      ...headers,
    },
  });
}

/** `{ error }` with a status: the short cause a client may see (never SQL, never a payload). */
export const failure = (status: number, error: string, extra: Record<string, unknown> = {}) =>
  json(status, { error, ...extra });

/** A refusal the handler turns into `{ error }` with its status. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

/** Compares two secrets in constant time (whatever their lengths). */
export function sameSecret(given: string | null | undefined, expected: string): boolean {
  if (typeof given !== 'string' || given === '') return false;
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

/** The request's JSON body, refused when it is not JSON, too large or not an object. */
export async function readJsonObject(request: Request): Promise<Record<string, unknown>> {
  const type = request.headers.get('content-type') ?? '';
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new HttpError(415, 'send the body as application/json');
  }
  const declared = Number(request.headers.get('content-length') ?? 0);
  if (declared > MAX_BODY_BYTES) throw new HttpError(413, `body over ${MAX_BODY_BYTES} bytes`);
  const text = await request.text();
  if (Buffer.byteLength(text) > MAX_BODY_BYTES) throw new HttpError(413, `body over ${MAX_BODY_BYTES} bytes`);
  let body: unknown;
  try {
    body = text === '' ? {} : JSON.parse(text);
  } catch {
    throw new HttpError(400, 'the body is not valid JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new HttpError(400, 'the body must be a JSON object');
  }
  return body as Record<string, unknown>;
}

/** A whole number from the query string, within [1, max]; `fallback` when absent. */
export function limitParam(url: URL, fallback: number, max: number): number {
  const value = url.searchParams.get('limit');
  if (value === null) return fallback;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > max) {
    throw new HttpError(400, `limit: expected a whole number from 1 to ${max}`);
  }
  return Number(value);
}
