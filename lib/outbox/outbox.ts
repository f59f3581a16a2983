import type { Pool } from 'pg';
import type { ContractEventInput, EventContracts, EventSpec, TypedEventInput } from '../contracts/define.js';
import type { Queryable } from '../db/queryable.js';
import { resolveSchema } from '../db/schema.js';
import { ConfigError } from '../errors.js';
import type { CleanupDeps, CleanupReport, CleanupRunOptions } from '../operations/cleanup.js';
import type { RedriveInput, RedriveResult } from '../operations/redrive.js';
import type { ReplayInput, ReplayOptions, ReplayResult } from '../operations/replay.js';
import type { DeadLetterPage, ListDeadLettersOptions } from '../sql/list-dead-letters.js';
import type { OutboxStats } from '../sql/outbox-stats.js';
import type { ReplayRecord } from '../sql/replay-events.js';
import { type EnqueueOptions, enqueueEvents } from './enqueue.js';
import type { NewOutboxEvent } from './types.js';

/** What {@link createOutbox} takes. */
export interface OutboxOptions<Defs extends Record<string, EventSpec> = never> {
  /**
   * The schema the outbox was migrated into (`migrate --schema …`). Default:
   * the `OUTBOX_SCHEMA` environment variable, else unqualified names, found
   * through the connection's `search_path`.
   */
  schema?: string | undefined;
  /**
   * Event contracts (`defineEvents` of `pg-lambda-outbox/contracts`): with
   * them, `enqueue` and `enqueueMany` take contract events
   * (`enqueue(client, 'order.created', { aggregateId, payload })`), checked
   * and typed as `contracts.enqueue` does.
   */
  contracts?: EventContracts<Defs> | undefined;
}

/** Options of one write through the handle: those of `enqueueEvents` but the schema. */
export type OutboxWriteOptions = Omit<EnqueueOptions, 'schema'>;

/** Writes without contracts: `enqueueEvent` and `enqueueEvents` in the handle's schema. */
export interface OutboxWrites {
  /** Writes one event on `db` (inside your transaction); returns its id. */
  enqueue(db: Queryable, event: NewOutboxEvent, options?: OutboxWriteOptions): Promise<string>;
  /** Writes several events in one statement, all or nothing; returns their ids in order. */
  enqueueMany(
    db: Queryable,
    events: readonly NewOutboxEvent[],
    options?: OutboxWriteOptions,
  ): Promise<string[]>;
}

/** Writes through contracts: `contracts.enqueue` and `enqueueMany` in the handle's schema. */
export interface OutboxContractWrites<Defs extends Record<string, EventSpec>> {
  /** Writes one event of `type` after checking it against its contract; returns its id. */
  enqueue<T extends keyof Defs & string>(
    db: Queryable,
    type: T,
    event: ContractEventInput<Defs[T]>,
    options?: OutboxWriteOptions,
  ): Promise<string>;
  /** Writes several contract events (`{ type, aggregateId, payload }`), each checked first; all or nothing. */
  enqueueMany(
    db: Queryable,
    events: readonly TypedEventInput<Defs>[],
    options?: OutboxWriteOptions,
  ): Promise<string[]>;
}

/** The operations of `pg-lambda-outbox/operations`, in the handle's schema (loaded on first use). */
export interface OutboxOperations {
  /** `redriveDeadLetters`: dead letters back to pending, or (`action: 'discard'`) finished unpublished. */
  redrive(pool: Pool, input: RedriveInput): Promise<RedriveResult>;
  /** `replayEvents`: republish published events, audited. */
  replay(pool: Pool, input: ReplayInput, options?: Omit<ReplayOptions, 'schema'>): Promise<ReplayResult>;
  /** `listDeadLetters`: the first `limit` dead letters and how many there are. */
  listDeadLetters(db: Queryable, options: Omit<ListDeadLettersOptions, 'schema'>): Promise<DeadLetterPage>;
  /** `listReplays`: the most recent replays. */
  listReplays(db: Queryable, options?: { limit?: number | undefined }): Promise<ReplayRecord[]>;
  /** `outboxStats`: pending, leased, backing off, dead letters, blocked aggregates, oldest pending age. */
  status(db: Queryable): Promise<OutboxStats>;
  /** `runCleanup`: delete what retention no longer needs. */
  cleanup(deps: CleanupDeps, run: CleanupRunOptions): Promise<CleanupReport>;
}

/**
 * The outbox of one service, its schema said once: writes, operations, and
 * (`createConsumer({ outbox, ... })` of `pg-lambda-outbox/consumer`) its
 * consumers. A thin binding of `schema` to the package's functions.
 */
export type Outbox<Defs extends Record<string, EventSpec> = never> = {
  /** The schema every call of this handle uses; undefined: unqualified names (`search_path`). */
  readonly schema: string | undefined;
} & ([Defs] extends [never] ? OutboxWrites : OutboxContractWrites<Defs>) &
  OutboxOperations;

const KNOWN_OPTIONS = new Set(['schema', 'contracts']);

/**
 * Says once where the outbox lives, for everything a service does with it.
 * Without `schema`, `OUTBOX_SCHEMA` (read now), else the connection's
 * `search_path`. A wrong schema shows at the first statement as an
 * `OutboxSchemaError` that names the schema looked in and the fix.
 *
 * @example
 * // outbox.ts, shared by the service's code
 * import { createOutbox } from 'pg-lambda-outbox';
 * export const outbox = createOutbox({ schema: 'outbox' });
 *
 * // a producer, inside its transaction
 * await outbox.enqueue(client, { aggregateType: 'order', aggregateId: orderId, eventType: 'order.placed', payload: { orderId } });
 * // a consumer
 * const consumer = createConsumer({ outbox, name: 'billing', pool, handlers });
 * // an operator
 * await outbox.redrive(pool, { eventType: 'order.placed', dryRun: true });
 */
export function createOutbox<Defs extends Record<string, EventSpec> = never>(
  options: OutboxOptions<Defs> = {},
): Outbox<Defs> {
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError('options', 'expected { schema?, contracts? }');
  }
  for (const key of Object.keys(options)) {
    if (!KNOWN_OPTIONS.has(key))
      throw new ConfigError(key, 'unknown outbox option (known: schema, contracts)');
  }
  const schema = resolveSchema(options.schema);
  const contracts = options.contracts as EventContracts<Record<string, EventSpec>> | undefined;
  if (contracts !== undefined && typeof contracts?.enqueueMany !== 'function') {
    throw new ConfigError(
      'contracts',
      'expected the event contracts of defineEvents (pg-lambda-outbox/contracts)',
    );
  }
  const write = (o: OutboxWriteOptions | undefined): EnqueueOptions => ({ ...o, schema });
  const writes = {
    // biome-ignore lint/suspicious/noExplicitAny: one body for both signatures; the Outbox type checks callers
    enqueue: async (db: Queryable, a: any, b?: any, c?: OutboxWriteOptions): Promise<string> => {
      if (contracts) return contracts.enqueue(db, a, b, write(c));
      const [id] = await enqueueEvents(db, [a], write(b));
      return id as string;
    },
    // biome-ignore lint/suspicious/noExplicitAny: as above
    enqueueMany: (db: Queryable, events: readonly any[], o?: OutboxWriteOptions): Promise<string[]> =>
      contracts ? contracts.enqueueMany(db, events, write(o)) : enqueueEvents(db, events, write(o)),
  };
  // The operations load on first use: a producer's cold start reads none of their code.
  const operations: OutboxOperations = {
    redrive: async (pool, input) =>
      (await import('../operations/redrive.js')).redriveDeadLetters(pool, input, { schema }),
    replay: async (pool, input, o) =>
      (await import('../operations/replay.js')).replayEvents(pool, input, { ...o, schema }),
    listDeadLetters: async (db, o) =>
      (await import('../operations/reads.js')).listDeadLetters(db, { ...o, schema }),
    listReplays: async (db, o) => (await import('../operations/reads.js')).listReplays(db, { ...o, schema }),
    status: async (db) => (await import('../operations/reads.js')).outboxStats(db, { schema }),
    cleanup: async (deps, run) =>
      (await import('../operations/cleanup.js')).runCleanup(
        { ...deps, options: { ...deps.options, schema } },
        run,
      ),
  };
  return Object.freeze({ schema, ...writes, ...operations }) as unknown as Outbox<Defs>;
}
