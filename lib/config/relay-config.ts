import { ConfigError } from '../errors.js';
import type { CircuitBreakerOptions } from '../publish/circuit-breaker.js';
import { routesSchema } from '../publish/route-schemas.js';
import type { RouteConfig } from '../publish/routes.js';
import { RELAY_DEFAULTS, type RelayOptions } from '../relay/options.js';
import * as z from '../zod.js';
import { type Env, readVar, schemaVar } from './env.js';
import { boolVar, intVar, jsonVar, numberVar } from './vars.js';

export interface RelayConfig {
  relay: RelayOptions;
  routes: RouteConfig[];
  /** EventBridge `Source` for bus targets that set none. */
  eventSource: string;
  /** AWS calls in flight at once. */
  concurrency: number;
  /** LISTEN for NOTIFY from the insert trigger instead of only polling. */
  listen: boolean;
  /** `OUTBOX_DIRECT_CALLS`: SendMessageBatch and PutEvents without the SDK's middleware (createAwsPublisher's `directCalls`). */
  directCalls: boolean;
  /** Per-target circuit breaker. */
  circuit: CircuitBreakerOptions;
  /**
   * The claim check (`OUTBOX_LARGE_PAYLOAD_BUCKET`, `OUTBOX_LARGE_PAYLOAD_PREFIX`):
   * payloads too large for a target's message go to this bucket. Unset: such
   * events are dead-lettered.
   */
  largePayloads?: { bucket: string; prefix: string } | undefined;
}

/**
 * Reads and validates the relay's environment once (at cold start). Throws a
 * {@link ConfigError} naming the first bad variable.
 *
 * - `OUTBOX_ROUTES` (required): JSON array of `{ match, targets }`, e.g.
 *   `[{"match":"order.*","targets":[{"type":"sqs","queueUrl":"https://..."}]}]`
 * - `OUTBOX_EVENT_SOURCE` (default `outbox`), `OUTBOX_ORDERING` (`none` | `aggregate`),
 *   `OUTBOX_DEAD_LETTER_POLICY` (`block` | `skip`, ordered mode: does a dead letter hold its aggregate),
 *   `OUTBOX_MAX_PER_AGGREGATE` (ordered mode: events of one aggregate per claim, default 50)
 * - `OUTBOX_BATCH_SIZE`, `OUTBOX_WORKERS`, `OUTBOX_CONCURRENCY`, `OUTBOX_LEASE_MS`,
 *   `OUTBOX_MAX_ATTEMPTS`, `OUTBOX_BACKOFF_BASE_MS`, `OUTBOX_BACKOFF_FACTOR`,
 *   `OUTBOX_BACKOFF_MAX_MS`, `OUTBOX_SAFETY_MARGIN_MS`, `OUTBOX_IDLE_WAIT_MS`, `OUTBOX_IDLE_WAIT_MIN_MS`, `OUTBOX_LISTEN`, `OUTBOX_LOG_AGGREGATE_ID`,
 *   `OUTBOX_MAX_PENDING_AGE_MS`, `OUTBOX_PUBLISHED_ROWS` (`keep` | `delete`: what becomes of a published row)
 * - `OUTBOX_SCHEMA`: the schema of the outbox tables (unset: unqualified names, via `search_path`)
 * - `OUTBOX_LARGE_PAYLOAD_BUCKET` (S3 bucket for payloads too large for a message; unset: such
 *   events are dead-lettered), `OUTBOX_LARGE_PAYLOAD_PREFIX` (key prefix, default `payloads`)
 * - `OUTBOX_IDLE_TAIL_MS` (scale to zero: an invocation returns after this long without work;
 *   unset: it polls to its time budget)
 * - `OUTBOX_MAX_RELAYS` (scale out: relays at once, each holding a slot of `outbox_relay_slots`;
 *   unset: no slots, no scale-out), `OUTBOX_SCALE_OUT_BACKLOG` (ready events that start more,
 *   default 1,000), `OUTBOX_SCALE_OUT_AGE_MS` (or the relay's claims running this far behind: the age of the oldest event a claim took, default 10 s),
 *   `OUTBOX_SCALE_OUT_PARK_MS` (relays that did not raise the rate: their slots stay closed this
 *   long, default 5 minutes),
 *   `OUTBOX_SLOT_ALIVE_MS` (a slot not renewed for this long is free: a relay killed mid-run stops
 *   counting as running, default 20 s),
 *   `OUTBOX_DB_CONNECTION_BUDGET` (database connections all relays together may open; checked
 *   against `OUTBOX_MAX_RELAYS × (OUTBOX_WORKERS + 1, + 1 with OUTBOX_LISTEN)` when set)
 * - `OUTBOX_CLAIM_MAX_BYTES` (payload bytes per claim; default derived from the function's
 *   memory, `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`: see {@link claimBytesForMemory})
 * - `OUTBOX_TARGET_FAILURES` (consecutive failed calls that back a target off, default 3),
 *   `OUTBOX_TARGET_PROBE_MAX_MS` (longest wait between probes of a backed-off target, default 60 s)
 * - `OUTBOX_DIRECT_CALLS` (`true`: SendMessageBatch and PutEvents without the SDK's middleware
 *   stack after each target's first call; default `false`)
 */
export function loadRelayConfig(env: Env = process.env): RelayConfig {
  const routes = parseRoutes(env.OUTBOX_ROUTES, 'OUTBOX_ROUTES');
  const ordering = readVar(
    env,
    'OUTBOX_ORDERING',
    z.enum(['none', 'aggregate'], { error: 'expected "none" or "aggregate"' }).optional(),
  );
  const relay: RelayOptions = {
    batchSize: readVar(env, 'OUTBOX_BATCH_SIZE', intVar(1, 5000)),
    workers: readVar(env, 'OUTBOX_WORKERS', intVar(1, 32)),
    leaseMs: readVar(env, 'OUTBOX_LEASE_MS', intVar(1000, 3_600_000)),
    maxAttempts: readVar(env, 'OUTBOX_MAX_ATTEMPTS', intVar(1, 1000)),
    backoff: {
      baseMs: readVar(env, 'OUTBOX_BACKOFF_BASE_MS', intVar(1, 3_600_000)),
      factor: readVar(env, 'OUTBOX_BACKOFF_FACTOR', numberVar(1, 10)),
      maxMs: readVar(env, 'OUTBOX_BACKOFF_MAX_MS', intVar(1, 86_400_000)),
    },
    ordering,
    deadLetterPolicy: readVar(
      env,
      'OUTBOX_DEAD_LETTER_POLICY',
      z.enum(['block', 'skip'], { error: 'expected "block" or "skip"' }).optional(),
    ),
    maxPerAggregate: readVar(env, 'OUTBOX_MAX_PER_AGGREGATE', intVar(1, 5000)),
    safetyMarginMs: readVar(env, 'OUTBOX_SAFETY_MARGIN_MS', intVar(0, 900_000)),
    idleWaitMs: readVar(env, 'OUTBOX_IDLE_WAIT_MS', intVar(1, 60_000)),
    idleWaitMinMs: readVar(env, 'OUTBOX_IDLE_WAIT_MIN_MS', intVar(1, 60_000)),
    idleTailMs: readVar(env, 'OUTBOX_IDLE_TAIL_MS', intVar(0, 900_000)),
    maxRelays: readVar(env, 'OUTBOX_MAX_RELAYS', intVar(1, 1000)),
    scaleOutBacklog: readVar(env, 'OUTBOX_SCALE_OUT_BACKLOG', intVar(1, 10_000_000)),
    scaleOutAgeMs: readVar(env, 'OUTBOX_SCALE_OUT_AGE_MS', intVar(1, 86_400_000)),
    scaleOutParkMs: readVar(env, 'OUTBOX_SCALE_OUT_PARK_MS', intVar(1_000, 86_400_000)),
    slotAliveMs: readVar(env, 'OUTBOX_SLOT_ALIVE_MS', intVar(1_000, 3_600_000)),
    maxPendingAgeMs: readVar(env, 'OUTBOX_MAX_PENDING_AGE_MS', intVar(60_000, 30 * 86_400_000)),
    publishedRows: readVar(
      env,
      'OUTBOX_PUBLISHED_ROWS',
      z.enum(['keep', 'delete'], { error: 'expected "keep" or "delete"' }).optional(),
    ),
    schema: schemaVar(env),
    logAggregateId: readVar(env, 'OUTBOX_LOG_AGGREGATE_ID', boolVar),
  };
  relay.maxClaimBytes =
    readVar(env, 'OUTBOX_CLAIM_MAX_BYTES', intVar(65_536, 2 ** 31 - 1)) ??
    claimBytesForMemory(readVar(env, 'AWS_LAMBDA_FUNCTION_MEMORY_SIZE', intVar(128, 10_240)), relay.workers);
  if (ordering === 'aggregate') {
    const standard = routes
      .flatMap((r) => r.targets)
      .filter((t) => t.type === 'sqs' && !t.queueUrl.endsWith('.fifo'));
    if (standard.length > 0) {
      // Not fatal: ordering is still kept by the relay, but a standard queue
      // may deliver out of order. Say so loudly where it is decided.
      process.emitWarning(
        `OUTBOX_ORDERING=aggregate with standard (non-FIFO) queues: ${standard.map((t) => (t.type === 'sqs' ? t.queueUrl : '')).join(', ')}; consumers may still see events out of order`,
      );
    }
  }
  const listen = readVar(env, 'OUTBOX_LISTEN', boolVar) ?? false;
  checkConnectionBudget(relay, listen, readVar(env, 'OUTBOX_DB_CONNECTION_BUDGET', intVar(1, 100_000)));
  return {
    relay,
    routes,
    eventSource: readVar(env, 'OUTBOX_EVENT_SOURCE', z.string().min(1).max(256).default('outbox')),
    concurrency: readVar(env, 'OUTBOX_CONCURRENCY', intVar(1, 256)) ?? 8,
    listen,
    directCalls: readVar(env, 'OUTBOX_DIRECT_CALLS', boolVar) ?? false,
    circuit: {
      failureThreshold: readVar(env, 'OUTBOX_TARGET_FAILURES', intVar(1, 100)),
      probeMaxMs: readVar(env, 'OUTBOX_TARGET_PROBE_MAX_MS', intVar(1_000, 3_600_000)),
    },
    largePayloads: largePayloadVars(env),
  };
}

/**
 * Database connections one Lambda relay opens: its pool (a connection per
 * worker and one for the outcomes and checks) and, with OUTBOX_LISTEN, the
 * LISTEN connection.
 */
export function relayConnections(workers: number | undefined, listen: boolean): number {
  return (workers ?? RELAY_DEFAULTS.workers) + 1 + (listen ? 1 : 0);
}

/**
 * Scale out must not take the database's connections: `OUTBOX_MAX_RELAYS`
 * relays of {@link relayConnections} each must fit
 * `OUTBOX_DB_CONNECTION_BUDGET` when it is set (the reference stack sets it:
 * stage param `relayConnectionBudget`).
 */
function checkConnectionBudget(relay: RelayOptions, listen: boolean, budget: number | undefined) {
  if (budget === undefined) return;
  const relays = relay.maxRelays ?? 1;
  const each = relayConnections(relay.workers, listen);
  if (relays * each > budget) {
    throw new ConfigError(
      'OUTBOX_MAX_RELAYS',
      `${relays} relays × ${each} database connections each (OUTBOX_WORKERS ${relay.workers ?? RELAY_DEFAULTS.workers} + 1${listen ? ' + 1 for OUTBOX_LISTEN' : ''}) = ${relays * each}, more than OUTBOX_DB_CONNECTION_BUDGET (${budget}); lower OUTBOX_MAX_RELAYS or OUTBOX_WORKERS, or raise the budget if the database has the connections`,
    );
  }
}

const MIB = 1024 * 1024;

/**
 * The claim's byte budget for a function of `memoryMb` running `workers`
 * loops: what is left after the runtime (128 MB), shared by the workers, each
 * of whose claimed payloads the relay may hold about four times at once (the
 * bytes received, the text, the S3 body or message, a spare) with room to
 * spare: (memory - 128 MB) / (workers × 6). 512 MB and 2 workers: 32 MiB a
 * claim. Unknown memory (outside Lambda): RELAY_DEFAULTS' 32 MiB.
 */
export function claimBytesForMemory(
  memoryMb: number | undefined,
  workers: number | undefined,
): number | undefined {
  if (memoryMb === undefined) return undefined;
  const loops = workers ?? RELAY_DEFAULTS.workers;
  return Math.max(MIB, Math.floor(((memoryMb - 128) * MIB) / (loops * 6)));
}

// S3 bucket names: 3-63 characters of lowercase letters, digits, dots and hyphens.
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/**
 * The claim check's bucket and key prefix from `OUTBOX_LARGE_PAYLOAD_BUCKET`
 * and `OUTBOX_LARGE_PAYLOAD_PREFIX` (default `payloads`); undefined without a
 * bucket. The relay stores there and the consumer reads there, so both read
 * the same variables through this function.
 */
export function largePayloadVars(env: Env): { bucket: string; prefix: string } | undefined {
  const bucket = readVar(
    env,
    'OUTBOX_LARGE_PAYLOAD_BUCKET',
    z.string().regex(BUCKET, 'expected an S3 bucket name').optional(),
  );
  const prefix = readVar(
    env,
    'OUTBOX_LARGE_PAYLOAD_PREFIX',
    z
      .string()
      .max(512)
      .regex(/^[\w!.*'()/-]+$/, "expected a key prefix of letters, digits and !-_.*'()/")
      .transform((p) => p.replace(/^\/+|\/+$/g, ''))
      .default('payloads'),
  );
  return bucket === undefined ? undefined : { bucket, prefix };
}

export { ConfigError };

/**
 * Validates routes in the `OUTBOX_ROUTES` format, given as JSON text or as
 * the parsed value (routes built in code): a non-empty array of
 * `{ match, targets }`, unknown keys refused, one destination never named
 * with two different settings. Throws a {@link ConfigError} naming `name`
 * and the first bad field.
 *
 * @example
 * const routes = parseRoutes([
 *   { match: 'order.*', targets: [{ type: 'sqs', queueUrl: process.env.ORDERS_QUEUE_URL }] },
 * ]);
 */
export function parseRoutes(routes: unknown, name = 'routes'): RouteConfig[] {
  const text = typeof routes === 'string' || routes === undefined ? routes : JSON.stringify(routes);
  return readVar(
    { [name]: text },
    name,
    jsonVar(routesSchema)
      .optional()
      .refine((v) => v !== undefined, 'required: a JSON array of routes'),
  ) as RouteConfig[];
}
