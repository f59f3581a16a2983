import { randomBytes } from 'node:crypto';
import type { Pool } from 'pg';
import type { Queryable } from '../db/queryable.js';
import { resolveSchema, withSchemaErrors } from '../db/schema.js';
import { withTransaction } from '../db/transaction.js';
import { DatabaseUnavailableError, OutboxSchemaError, ValidationError } from '../errors.js';
import { type OutboxLogger, silentLogger } from '../observer.js';
import { listDeadLetters } from '../sql/list-dead-letters.js';
import { outboxStats } from '../sql/outbox-stats.js';
import { relaySlotState } from '../sql/relay-slots.js';
import { type ActionName, runAction } from './actions.js';
import { deadLetterGroups, deadLettersOfGroup } from './groups.js';
import {
  failure,
  HttpError,
  json,
  limitParam,
  readJsonObject,
  SECURITY_HEADERS,
  sameSecret,
} from './http.js';
import {
  aggregateTimeline,
  eventDetail,
  LAST_DAY,
  LAST_HOUR,
  TIMELINE_FINISHED_SCAN,
  throughput,
  waitingTargets,
} from './queries.js';
import { staticFile } from './static.js';

/** Decides whether a request may use the API (the team's own authentication). */
export type AdminAuth = (request: Request) => boolean | Promise<boolean>;

export interface AdminHandlerOptions {
  /** The outbox's database; actions run their own transactions on it. */
  db: Pool;
  /** Schema of the outbox tables. Default: `OUTBOX_SCHEMA`, else the connection's `search_path`. */
  schema?: string | undefined;
  /**
   * Who may call: a function of the request (true: allowed, else 401), or
   * `'none'` when the handler is mounted behind authentication of its own
   * (an IAM-authenticated function URL, the service's middleware). Required:
   * there is no default.
   */
  auth: AdminAuth | 'none';
  /** Redrive, discard and replay (POST /api/actions/*). Default false: read-only, actions answer 403. */
  allowActions?: boolean | undefined;
  /** Event payloads in GET /api/events/:id. Default false: payloads may hold personal data. */
  showPayloads?: boolean | undefined;
  /**
   * Who acts, as the audit records it (`discarded_by`, a replay's
   * `requested_by`, the audit log line): a name, or a function of the
   * request (e.g. the user your authentication found). Default `console`.
   */
  actor?: string | ((request: Request) => string | Promise<string>) | undefined;
  /**
   * The CSRF token POSTs must carry in `X-CSRF-Token` (GET /api/session
   * hands it out). Default: a random one per handler; give one when several
   * instances serve the same clients (a function URL's concurrent instances).
   */
  csrfToken?: string | undefined;
  /** Path the handler is mounted under, e.g. `/outbox`. Default: none. */
  basePath?: string | undefined;
  /** Longest any read may run, in ms (`statement_timeout`, per request). Default 5000. */
  statementTimeoutMs?: number | undefined;
  /** Where failures are described in full, and actions audited. Default: nothing is logged. */
  logger?: OutboxLogger | undefined;
}

export type AdminHandler = (request: Request) => Promise<Response>;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Relay slots are counted whatever maxRelays the relays run with. */
const ANY_SLOT = 2_147_483_647;
const MAX_LIST = 1_000;
const MAX_NAME = 255;

/**
 * The console (its pages at `<basePath>/`, its JSON API under
 * `<basePath>/api/`) as a web-standard request handler: mount it in a
 * service (any framework that speaks `Request`/`Response`: Hono, Next.js
 * route handlers, a Lambda function URL through an adapter) or serve it with
 * `startConsole`. Every read is bounded (indexes, LIMITs, a statement
 * timeout, a read-only transaction); errors answer `{ error }` with a short
 * cause, never SQL or a payload, and are logged in full through `logger`.
 */
export function createAdminHandler(options: AdminHandlerOptions): AdminHandler {
  if (options.auth !== 'none' && typeof options.auth !== 'function') {
    throw new TypeError(
      "auth: give a function of the request, or 'none' when the handler sits behind your own",
    );
  }
  const schema = resolveSchema(options.schema);
  const logger = options.logger ?? silentLogger;
  const csrfToken = options.csrfToken ?? randomBytes(32).toString('base64url');
  const timeoutMs = Math.max(1, Math.floor(options.statementTimeoutMs ?? 5_000));
  const base = (options.basePath ?? '').replace(/\/+$/, '');
  const allowActions = options.allowActions === true;
  const showPayloads = options.showPayloads === true;

  const read = <T>(fn: (db: Queryable) => Promise<T>): Promise<T> =>
    withSchemaErrors(schema, () =>
      withTransaction(options.db, async (client) => {
        // No JIT: the reads are bounded and short, but their estimates (a
        // generate_series of buckets, each a subquery) pass jit_above_cost,
        // and compiling cost 250 ms of an hour series that runs in 20 ms.
        await client.query(
          `SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = ${timeoutMs}; SET LOCAL jit = off`,
        );
        return fn(client);
      }),
    );

  const actorOf = async (request: Request): Promise<string> => {
    const actor = typeof options.actor === 'function' ? await options.actor(request) : options.actor;
    return typeof actor === 'string' && actor !== '' ? actor.slice(0, 256) : 'console';
  };

  async function route(request: Request, url: URL, path: string): Promise<Response> {
    const get = request.method === 'GET';
    if (path === '/api/session' && get) {
      return json(200, {
        csrfToken,
        readOnly: !allowActions,
        allowActions,
        showPayloads,
        schema: schema ?? null,
        actor: allowActions ? await actorOf(request) : null,
      });
    }
    if (path === '/api/overview' && get) return json(200, await read((db) => overview(db, schema)));
    if (path === '/api/dead-letters/groups' && get) {
      return json(200, await read((db) => deadLetterGroups(db, schema)));
    }
    if (path === '/api/dead-letters' && get) return json(200, await deadLetters(url));
    if (path === '/api/throughput' && get) {
      const window = url.searchParams.get('window') ?? 'day';
      if (window !== 'hour' && window !== 'day') throw new HttpError(400, 'window: expected hour or day');
      const shape = window === 'hour' ? LAST_HOUR : LAST_DAY;
      return json(200, { window, ...shape, series: await read((db) => throughput(db, schema, shape)) });
    }
    const event = /^\/api\/events\/([^/]+)$/.exec(path);
    if (event && get) return eventResponse(event[1] as string);
    const timeline = /^\/api\/aggregates\/([^/]+)\/([^/]+)\/timeline$/.exec(path);
    if (timeline && get) {
      const aggregate = { type: name(timeline[1] as string), id: name(timeline[2] as string) };
      const limit = limitParam(url, 200, MAX_LIST);
      const events = await read((db) => aggregateTimeline(db, aggregate, { schema, limit }));
      return json(200, { aggregate, limit, finishedScope: TIMELINE_FINISHED_SCAN, events });
    }
    const action = /^\/api\/actions\/(redrive|discard|replay)$/.exec(path);
    if (action && request.method === 'POST') return actionResponse(action[1] as ActionName, request);
    if (event || timeline || action || path.startsWith('/api/')) {
      const known = event || timeline || action || KNOWN.has(path);
      return known ? failure(405, 'method not allowed') : failure(404, 'no such API route');
    }
    const page = get ? await staticFile(path) : undefined;
    return page ?? failure(404, 'not found');
  }

  async function deadLetters(url: URL) {
    const limit = limitParam(url, 50, MAX_LIST);
    const group = url.searchParams.get('group');
    const eventType = url.searchParams.get('eventType') ?? undefined;
    if (group !== null) {
      if (!/^[0-9a-f]{16}$/.test(group)) throw new HttpError(400, 'group: expected a group id');
      return read((db) => deadLettersOfGroup(db, group, { schema, limit }));
    }
    if (eventType !== undefined && (eventType === '' || eventType.length > 128)) {
      throw new HttpError(400, 'eventType: expected 1 to 128 characters');
    }
    return read((db) => listDeadLetters(db, { limit, eventType, schema }));
  }

  async function eventResponse(id: string): Promise<Response> {
    if (!UUID.test(id)) throw new HttpError(400, 'expected an event id (a UUID)');
    const detail = await read((db) => eventDetail(db, id, { schema, withPayload: showPayloads }));
    if (!detail) return failure(404, 'no such event');
    return json(200, showPayloads ? detail : { ...detail, payloadHidden: true });
  }

  async function actionResponse(name: ActionName, request: Request): Promise<Response> {
    if (!allowActions) {
      return failure(
        403,
        'read-only: the console was started without actions (--allow-actions, allowActions)',
      );
    }
    if (!sameSecret(request.headers.get('x-csrf-token'), csrfToken)) {
      return failure(403, 'missing or wrong X-CSRF-Token (GET /api/session gives it)');
    }
    const body = await readJsonObject(request);
    const actor = await actorOf(request);
    return json(200, await runAction(name, body, { pool: options.db, schema, actor, logger, read }));
  }

  return async (request) => {
    let url: URL;
    try {
      url = new URL(request.url);
    } catch {
      return failure(400, 'bad request URL');
    }
    if (base !== '' && url.pathname !== base && !url.pathname.startsWith(`${base}/`)) {
      return failure(404, 'not found');
    }
    // The page's links are relative (assets/app.js, api/...): it must be served at `<base>/`.
    if (base !== '' && url.pathname === base && request.method === 'GET') {
      return new Response(null, {
        status: 308,
        headers: { ...SECURITY_HEADERS, location: `${base}/${url.search}` },
      });
    }
    const path = url.pathname.slice(base.length) || '/';
    try {
      if (options.auth !== 'none' && (await options.auth(request)) !== true) {
        return failure(401, 'not authenticated');
      }
      return await route(request, url, path);
    } catch (error) {
      return errorResponse(error, `${request.method} ${path}`, logger);
    }
  };
}

const KNOWN = new Set([
  '/api/session',
  '/api/overview',
  '/api/throughput',
  '/api/dead-letters/groups',
  '/api/dead-letters',
]);

/** An aggregate type or id from the path: decoded, 1 to 255 characters. */
function name(segment: string): string {
  let value: string;
  try {
    value = decodeURIComponent(segment);
  } catch {
    throw new HttpError(400, 'the aggregate in the path is not valid URL encoding');
  }
  if (value === '' || value.length > MAX_NAME)
    throw new HttpError(400, 'aggregate: expected 1 to 255 characters');
  return value;
}

async function overview(db: Queryable, schema: string | undefined) {
  const stats = await outboxStats(db, { schema });
  const slots = await relaySlotState(db, { maxRelays: ANY_SLOT, schema });
  const waiting = await waitingTargets(db, schema);
  const minutes = await throughput(db, schema, LAST_HOUR);
  return {
    at: new Date(),
    ...stats,
    relays: { running: slots.running, closedSlots: slots.held - slots.running },
    waitingForTargets: waiting,
    perMinute: {
      window: 'last hour',
      capPerMinute: LAST_HOUR.cap,
      minutes: minutes.map(({ start, ...counts }) => ({ minute: start, ...counts })),
    },
  };
}

/** The short cause a client sees for what was thrown; the detail goes to the log. */
function errorResponse(error: unknown, route: string, logger: OutboxLogger): Response {
  if (error instanceof HttpError) return failure(error.status, error.message, error.extra);
  if (error instanceof ValidationError) return failure(400, error.message);
  const code = (error as { code?: unknown })?.code;
  logger.error('console request failed', {
    route,
    error: error instanceof Error ? error.name : typeof error,
    code: typeof code === 'string' ? code : undefined,
    message: error instanceof Error ? error.message : String(error),
  });
  if (error instanceof OutboxSchemaError) return failure(500, 'outbox tables not found (see the server log)');
  if (error instanceof DatabaseUnavailableError) return failure(503, 'database unavailable');
  if (code === '57014') return failure(504, 'a query took longer than the console allows');
  if (code === '40001' || code === '40P01' || code === '55P03') return failure(409, 'conflict; try again');
  return failure(500, 'internal error (see the server log)');
}
