import { failure, SECURITY_HEADERS, sameSecret } from './http.js';

export interface GuardOptions {
  /** The secret every request must carry. */
  token: string;
  /** The port the server listens on (the cookie's name carries it: cookies are not kept apart by port). */
  port: number;
  /**
   * Host header values accepted (`127.0.0.1:8080`), lower case. Empty: any
   * (a server bound to every interface with no name given; it warns).
   */
  allowedHosts: readonly string[];
}

/** The cookie the console keeps its token in, once a `?token=` URL was opened. */
export const cookieName = (port: number) => `pg_lambda_outbox_console_${port}`;

/**
 * Puts the local console's rules in front of a handler, for every request
 * (API, pages and static files alike):
 * - the Host header must be one the server answers to: a page of another
 *   site whose name was rebound to 127.0.0.1 (DNS rebinding) sends its own
 *   name, and is refused (403);
 * - a POST from a page must come from the console's own origin (403);
 * - the token, from `Authorization: Bearer <token>` or the cookie (401
 *   otherwise), compared in constant time;
 * - a GET with `?token=<token>` in the URL (the link the CLI prints) sets
 *   the cookie (HttpOnly, SameSite=Strict) and redirects to the same URL
 *   without the token, as Jupyter does;
 * - every response carries `Cache-Control: no-store` and
 *   `X-Content-Type-Options: nosniff`.
 */
export function withTokenGuard(
  handler: (request: Request) => Promise<Response>,
  options: GuardOptions,
): (request: Request) => Promise<Response> {
  const cookie = cookieName(options.port);
  const hosts = new Set(options.allowedHosts.map((h) => h.toLowerCase()));

  return async (request) => {
    const host = (request.headers.get('host') ?? '').toLowerCase();
    if (hosts.size > 0 && !hosts.has(host)) return failure(403, 'unexpected Host header');
    const origin = request.headers.get('origin');
    if (request.method !== 'GET' && origin !== null && hosts.size > 0 && !hosts.has(originHost(origin))) {
      return failure(403, 'cross-origin request refused');
    }
    const url = new URL(request.url);
    const fromUrl = url.searchParams.get('token');
    if (fromUrl !== null) {
      if (request.method !== 'GET' || !sameSecret(fromUrl, options.token)) return failure(401, 'wrong token');
      url.searchParams.delete('token');
      return new Response(null, {
        status: 303,
        headers: {
          ...SECURITY_HEADERS,
          // One leading slash: `//host/...` would send the browser to another site.
          location: `${url.pathname.replace(/^\/+/, '/')}${url.search}`,
          'set-cookie': `${cookie}=${options.token}; HttpOnly; SameSite=Strict; Path=/`,
        },
      });
    }
    if (!sameSecret(bearer(request) ?? cookieValue(request, cookie), options.token)) {
      return failure(401, 'missing or wrong token: open the URL the console printed');
    }
    const response = await handler(request);
    for (const [key, value] of Object.entries(SECURITY_HEADERS)) {
      if (!response.headers.has(key)) response.headers.set(key, value);
    }
    return response;
  };
}

function originHost(origin: string): string {
  try {
    return new URL(origin).host.toLowerCase();
  } catch {
    return '';
  }
}

function bearer(request: Request): string | undefined {
  const match = /^Bearer\s+(\S+)$/i.exec(request.headers.get('authorization') ?? '');
  return match?.[1];
}

function cookieValue(request: Request, name: string): string | undefined {
  for (const part of (request.headers.get('cookie') ?? '').split(';')) {
    const [key, ...rest] = part.trim().split('=');
    if (key === name) return rest.join('=');
  }
  return undefined;
}
