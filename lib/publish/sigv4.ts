import { createHash, createHmac } from 'node:crypto';

/**
 * AWS Signature Version 4 for a direct call (direct-calls.ts): a POST with
 * a string body and no query string, signed in an Authorization header.
 *
 * The SDK's signer (`@smithy/signature-v4`) is general: per call it clones
 * the request, recomputes an HMAC of the secret to look up its cached
 * signing key, and goes through six promises. For a relay that signs two
 * calls per 10 events, that was about a tenth of its CPU. This one does the
 * same steps with `node:crypto` and keeps the day's signing key beside the
 * credentials it was made from.
 *
 * It reproduces that signer's output for these requests byte for byte:
 * header names lowercased and sorted, values with line breaks, runs of
 * spaces and tabs and the ends trimmed as it trims them; the headers it never
 * signs (`user-agent`, `x-amzn-trace-id`, `proxy-*`, `sec-*`, …) left out of
 * the signature but sent; `x-amz-date`, `x-amz-security-token` (with a
 * session token) and `x-amz-content-sha256` added. test/unit/sigv4.test.ts
 * compares the two over many requests, and {@link signsLikeSdk} compares
 * them once for each request a direct caller keeps before it is used: a
 * mismatch (a future SDK that signs differently) keeps the SDK's signer.
 */

export interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string | undefined;
}

export interface SignableRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
}

/** The headers the SDK's signer never signs (ALWAYS_UNSIGNABLE_HEADERS); they are sent as they are. */
const UNSIGNABLE = new Set([
  'authorization',
  'cache-control',
  'connection',
  'expect',
  'from',
  'keep-alive',
  'max-forwards',
  'pragma',
  'referer',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'user-agent',
  'x-amzn-trace-id',
]);

/** Headers the signer sets itself: a request's own are dropped first, as the SDK's signer drops them. */
const GENERATED = new Set(['authorization', 'x-amz-date', 'date']);

const sha256Hex = (data: string) => createHash('sha256').update(data, 'utf8').digest('hex');

/** `20261203T065904Z` from a date. */
function amzDate(date: Date): string {
  const iso = date.toISOString(); // 2026-12-03T06:59:04.123Z
  return `${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 13)}${iso.slice(14, 16)}${iso.slice(17, 19)}Z`;
}

/** A header value as it is signed. */
function canonicalValue(value: string): string {
  return value
    .replace(/[\r\n]/g, ' ')
    .replace(/[ \t]+/g, ' ')
    .replace(/^ | $/g, '');
}

/** The path as the SDK's signer signs it (`uriEscapePath`): segments normalized, then URI-escaped (an escaped path is escaped again). */
function canonicalPath(path: string): string {
  const segments: string[] = [];
  for (const segment of path.split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment === '..') segments.pop();
    else segments.push(segment);
  }
  const normalized = `${path.startsWith('/') ? '/' : ''}${segments.join('/')}${segments.length > 0 && path.endsWith('/') ? '/' : ''}`;
  return escapeUri(normalized).replace(/%2F/g, '/');
}

/** RFC 3986 escaping, as `@smithy/util-uri-escape` does it. */
function escapeUri(uri: string): string {
  return encodeURIComponent(uri).replace(
    /[!'()*]/g,
    (c) => `%${(c.codePointAt(0) as number).toString(16).toUpperCase()}`,
  );
}

export class SigV4Signer {
  private readonly path: string;
  /** The last signing key and what it was made of. */
  private key: { secret: string; day: string; key: Buffer } | undefined;

  constructor(
    private readonly options: {
      credentials: () => Promise<Credentials>;
      region: string;
      service: string;
      path: string;
    },
  ) {
    this.path = canonicalPath(options.path);
  }

  private signingKey(secret: string, day: string): Buffer {
    const cached = this.key;
    if (cached && cached.secret === secret && cached.day === day) return cached.key;
    let key = createHmac('sha256', `AWS4${secret}`).update(day).digest();
    for (const part of [this.options.region, this.options.service, 'aws4_request']) {
      key = createHmac('sha256', key).update(part).digest();
    }
    this.key = { secret, day, key };
    return key;
  }

  /** The request's headers, signed (a new object; the request is not changed). */
  async sign(request: SignableRequest, signingDate: Date): Promise<Record<string, string>> {
    const credentials = await this.options.credentials();
    if (typeof credentials?.accessKeyId !== 'string' || typeof credentials.secretAccessKey !== 'string') {
      throw new Error('Resolved credential object is not valid');
    }
    const headers: Record<string, string> = {};
    for (const name of Object.keys(request.headers)) {
      if (!GENERATED.has(name.toLowerCase())) headers[name] = request.headers[name] as string;
    }
    const longDate = amzDate(signingDate);
    const day = longDate.slice(0, 8);
    headers['x-amz-date'] = longDate;
    if (credentials.sessionToken) headers['x-amz-security-token'] = credentials.sessionToken;
    let payloadHash: string | undefined;
    for (const name of Object.keys(headers)) {
      if (name.toLowerCase() === 'x-amz-content-sha256') payloadHash = headers[name];
    }
    if (payloadHash === undefined) {
      payloadHash = sha256Hex(request.body);
      headers['x-amz-content-sha256'] = payloadHash;
    }

    const canonical: Record<string, string> = {};
    for (const name of Object.keys(headers).sort()) {
      const value = headers[name];
      if (value == null) continue;
      const lower = name.toLowerCase();
      if (UNSIGNABLE.has(lower) || lower.startsWith('proxy-') || lower.startsWith('sec-')) continue;
      canonical[lower] = canonicalValue(value);
    }
    const names = Object.keys(canonical).sort();
    let lines = '';
    for (const name of names) lines += `${name}:${canonical[name]}\n`;
    const signedHeaders = names.join(';');
    const canonicalRequest = `${request.method}\n${this.path}\n\n${lines}\n${signedHeaders}\n${payloadHash}`;
    const scope = `${day}/${this.options.region}/${this.options.service}/aws4_request`;
    const stringToSign = `AWS4-HMAC-SHA256\n${longDate}\n${scope}\n${sha256Hex(canonicalRequest)}`;
    const signature = createHmac('sha256', this.signingKey(credentials.secretAccessKey, day))
      .update(stringToSign, 'utf8')
      .digest('hex');
    headers.authorization = `AWS4-HMAC-SHA256 Credential=${credentials.accessKeyId}/${scope}, SignedHeaders=${signedHeaders}, Signature=${signature}`;
    return headers;
  }
}

/** The SDK's signer, as direct calls use it. */
export interface SdkSigner {
  sign(
    request: {
      method: string;
      protocol: string;
      hostname: string;
      path: string;
      query: object;
      headers: Record<string, string>;
      body?: unknown;
    },
    options: { signingDate: Date },
  ): Promise<{ headers: Record<string, string> }>;
}

/**
 * Whether `fast` signs `request` exactly as the SDK's signer does, with the
 * same credentials and date: every header the same, nothing more or less.
 */
export async function signsLikeSdk(
  fast: SigV4Signer,
  sdk: SdkSigner,
  request: SignableRequest & { protocol: string; hostname: string },
  signingDate: Date,
): Promise<boolean> {
  const [ours, theirs] = await Promise.all([
    fast.sign(request, signingDate),
    sdk.sign({ ...request, query: {}, headers: { ...request.headers } }, { signingDate }),
  ]);
  const a = Object.entries(ours).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
  const b = Object.entries(theirs.headers).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
  return JSON.stringify(a) === JSON.stringify(b);
}
