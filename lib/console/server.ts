import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { ConfigError } from '../errors.js';
import { type OutboxLogger, silentLogger } from '../observer.js';
import { withTokenGuard } from './guard.js';
import { type AdminHandlerOptions, createAdminHandler } from './handler.js';
import { requestListener } from './node-adapter.js';

export interface ConsoleOptions {
  /** The outbox's database as a URL (the console opens a small pool), or… */
  databaseUrl?: string | undefined;
  /** …a pool of your own (left open by `close()`). */
  db?: pg.Pool | undefined;
  schema?: string | undefined;
  /** Port to listen on; 0 (default) takes any free port. */
  port?: number | undefined;
  /** Interface to listen on. Default 127.0.0.1; any other needs `allowNonLoopback`. */
  host?: string | undefined;
  /** Required to listen on an interface other than loopback; the console then warns. */
  allowNonLoopback?: boolean | undefined;
  /**
   * Host header values accepted besides the address it listens on (for a
   * name that points at it). Listening on every interface (0.0.0.0, ::)
   * without any: the Host header is not checked, and the console warns.
   */
  allowedHosts?: readonly string[] | undefined;
  allowActions?: boolean | undefined;
  showPayloads?: boolean | undefined;
  /** Who acts, for the audit. Default `console`. */
  actor?: string | undefined;
  /** Longest any one query may run, in ms. Default 5000 for reads; actions: 30000 on the pool it opens. */
  statementTimeoutMs?: number | undefined;
  logger?: OutboxLogger | undefined;
}

export interface ConsoleServer {
  /** `http://127.0.0.1:<port>/?token=<token>`: opening it logs the browser in. */
  url: string;
  token: string;
  port: number;
  /** Stops listening, closes open connections and the pool it opened. */
  close(): Promise<void>;
}

const LOOPBACK = /^(127(\.\d{1,3}){3}|::1|localhost)$/i;
const EVERY_INTERFACE = new Set(['0.0.0.0', '::', '']);

/**
 * Serves the console's pages and API on a local port with
 * node:http, behind a one-time token: see {@link withTokenGuard} for the
 * rules every request passes.
 */
export async function startConsole(options: ConsoleOptions): Promise<ConsoleServer> {
  const host = options.host ?? '127.0.0.1';
  const loopback = LOOPBACK.test(host);
  const logger = options.logger ?? silentLogger;
  if (!loopback && options.allowNonLoopback !== true) {
    throw new ConfigError(
      'host',
      `${host} is not a loopback address: the console would be reachable from the network; pass allowNonLoopback (--host is that choice on the command line) if that is meant`,
    );
  }
  if ((options.db === undefined) === (options.databaseUrl === undefined)) {
    throw new ConfigError('db', 'give either databaseUrl or db');
  }
  const pool =
    options.db ??
    new pg.Pool({
      connectionString: options.databaseUrl,
      max: 4,
      connectionTimeoutMillis: 5_000,
      statement_timeout: 30_000,
      application_name: 'pg-lambda-outbox console',
    });
  if (options.db === undefined) pool.on('error', () => {});
  const closePool = options.db === undefined ? () => pool.end() : async () => {};

  const token = randomBytes(32).toString('base64url');
  const handlerOptions: AdminHandlerOptions = {
    db: pool,
    schema: options.schema,
    // The token guard in front of it is the authentication.
    auth: 'none',
    allowActions: options.allowActions,
    showPayloads: options.showPayloads,
    actor: options.actor,
    statementTimeoutMs: options.statementTimeoutMs,
    logger,
  };
  let handler: ReturnType<typeof createAdminHandler>;
  try {
    handler = createAdminHandler(handlerOptions);
  } catch (error) {
    await closePool();
    throw error;
  }

  const server = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, host, () => resolve());
    });
  } catch (error) {
    await closePool();
    throw error;
  }
  const port = (server.address() as AddressInfo).port;
  const hosts = allowedHosts(host, port, options.allowedHosts ?? []);
  if (!loopback) {
    logger.warn(
      `console listening on ${host}:${port}, reachable from the network; anyone with the token can read the outbox${options.allowActions ? ' and act on it' : ''}${hosts.length === 0 ? '; the Host header is not checked (no allowedHosts for an address on every interface)' : ''}`,
      { host, port, host_header_checked: hosts.length > 0 },
    );
  }
  const origin = `http://${urlHost(loopback || EVERY_INTERFACE.has(host) ? '127.0.0.1' : host)}:${port}`;
  const guarded = withTokenGuard(handler, { token, port, allowedHosts: hosts });
  server.on(
    'request',
    requestListener(guarded, origin, (error) =>
      logger.error('console response failed', { error: String(error) }),
    ),
  );
  return {
    url: `${origin}/?token=${token}`,
    token,
    port,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await closePool();
    },
  };
}

/** The Host header values the server answers to. */
function allowedHosts(host: string, port: number, extra: readonly string[]): string[] {
  const named = extra.map((h) => (h.includes(':') && !h.startsWith('[') ? h : `${h}:${port}`));
  if (EVERY_INTERFACE.has(host)) return named;
  const own = LOOPBACK.test(host) ? ['127.0.0.1', 'localhost', '[::1]'] : [urlHost(host)];
  return [...own.map((h) => `${h}:${port}`), ...named];
}

const urlHost = (host: string) => (host.includes(':') && !host.startsWith('[') ? `[${host}]` : host);
