import type { ClientBase } from 'pg';
import type { EventHandler, HandlerContext } from '../consumer/handlers.js';
import type { Queryable } from '../db/queryable.js';
import { ConfigError, OutboxError, ValidationError } from '../errors.js';
import { type EnqueueOptions, enqueueEvents } from '../outbox/enqueue.js';
import { serializePayload } from '../outbox/json-text.js';
import type { NewOutboxEvent } from '../outbox/types.js';
import type { Envelope } from '../publish/envelope.js';
import { routesSchema } from '../publish/route-schemas.js';
import type { RouteConfig, TargetConfig } from '../publish/routes.js';
import { describeIssue, headerValue, moreIssues, type SchemaIssue } from './issues.js';
import { isStandardSchema, type StandardSchemaV1 } from './standard-schema.js';

/**
 * The header that carries an event's contract version from producer to
 * consumer (the envelope's `headers`). An event written without it (the
 * untyped API, an older producer) is version 1.
 */
export const VERSION_HEADER = 'event-version';

/** One event type's contract, when it needs more than a schema. */
export interface EventContract<
  S extends StandardSchemaV1 = StandardSchemaV1,
  V extends number = number,
  P extends Record<number, StandardSchemaV1> = Record<number, StandardSchemaV1>,
> {
  /** The payload's schema: what producers write now. */
  schema: S;
  /** The version `schema` describes. Default 1. */
  version?: V;
  /**
   * Earlier versions consumers still accept (events already written, or
   * producers not yet upgraded), by version number. Producers always write
   * `schema`; handlers get `event.version` to tell them apart.
   */
  previous?: P;
  /** The aggregate type of these events, so producers need not repeat it. */
  aggregateType?: string;
  /** Where the relay sends them (`contracts.routes()`, the AsyncAPI channels). */
  targets?: readonly TargetConfig[];
  /** What the event means, for the published contract. */
  description?: string;
  /**
   * JSON Schema of `schema`, for a library without the Standard JSON Schema
   * extension (`~standard.jsonSchema`); zod 4 has it, valibot through
   * `toStandardJsonSchema` from `@valibot/to-json-schema`.
   */
  jsonSchema?: Record<string, unknown>;
}

/** An event type's definition: its payload schema, or an {@link EventContract}. */
export type EventSpec = StandardSchemaV1 | EventContract;

type SchemaOf<D> = D extends { schema: infer S extends StandardSchemaV1 }
  ? S
  : D extends StandardSchemaV1
    ? D
    : never;
type VersionOf<D> = D extends { schema: StandardSchemaV1; version: infer V extends number } ? V : 1;
type PreviousOf<D> = D extends {
  schema: StandardSchemaV1;
  previous: infer P extends Record<number, StandardSchemaV1>;
}
  ? P
  : Record<never, never>;

type OutputOf<S> = S extends StandardSchemaV1 ? StandardSchemaV1.InferOutput<S> : never;

/** What a producer gives for an event's payload: the schema's input type. */
export type PayloadInput<D> = StandardSchemaV1.InferInput<SchemaOf<D>>;

/**
 * What a handler receives for an event type: the envelope with the payload
 * as the schema of its version gives it (validated), and the version; one
 * member per version the contract accepts.
 */
export type ContractEvent<D> =
  | (Envelope<StandardSchemaV1.InferOutput<SchemaOf<D>>> & { version: VersionOf<D> })
  | {
      [K in keyof PreviousOf<D> & number]: Envelope<OutputOf<PreviousOf<D>[K]>> & {
        version: K;
      };
    }[keyof PreviousOf<D> & number];

/** One event to write through a contract. */
export interface ContractEventInput<D> {
  aggregateId: string;
  /** Checked against the contract's schema before anything is written. */
  payload: PayloadInput<D>;
  /** Default: the contract's `aggregateType` (one of the two is required). */
  aggregateType?: string;
  headers?: Record<string, string>;
  trace?: { traceparent: string; tracestate?: string };
  id?: string;
}

/** {@link ContractEventInput} with its event type, for `enqueueMany`. */
export type TypedEventInput<Defs extends Record<string, EventSpec>> = {
  [T in keyof Defs & string]: { type: T } & ContractEventInput<Defs[T]>;
}[keyof Defs & string];

/**
 * The payload a producer writes for event type `T` of contracts `C`
 * (`typeof events`): `PayloadOf<typeof events, 'order.created'>`.
 */
export type PayloadOf<C, T extends string> =
  C extends EventContracts<infer D> ? (T extends keyof D ? PayloadInput<D[T]> : never) : never;

/** What a handler of event type `T` of contracts `C` receives (every accepted version). */
export type EventOf<C, T extends string> =
  C extends EventContracts<infer D> ? (T extends keyof D ? ContractEvent<D[T]> : never) : never;

/** A handler of a contract's event type: a typed, checked payload. */
export type ContractHandler<D> = (
  event: ContractEvent<D>,
  tx: ClientBase,
  context: HandlerContext,
) => Promise<void> | void;

export type ContractHandlers<Defs extends Record<string, EventSpec>> = {
  [T in keyof Defs & string]?: ContractHandler<Defs[T]>;
};

/**
 * An incoming event broke its contract: its handler was not called. The
 * message names the field and the kind of check it failed, never the value
 * (the error is logged, and payloads may hold personal data).
 */
export class ContractViolationError extends OutboxError {
  readonly eventType: string;
  readonly version: number | undefined;
  /** Where in the envelope: `payload.customer.email`, `headers.event-version`. */
  readonly field: string;
  /** Every issue the schema found, by path and kind of check (`payload.customer.email`, `invalid_format (email)`). */
  readonly issues: readonly SchemaIssue[];

  constructor(
    eventType: string,
    version: number | undefined,
    field: string,
    message: string,
    issues: readonly SchemaIssue[] = [],
  ) {
    super(`${eventType}${version === undefined ? '' : ` v${version}`}: ${field}: ${message}`, {
      retryable: false,
    });
    this.name = 'ContractViolationError';
    this.eventType = eventType;
    this.version = version;
    this.field = field;
    this.issues = issues;
  }
}

/** A contract as `defineEvents` resolved it. */
export interface ResolvedContract {
  type: string;
  version: number;
  schema: StandardSchemaV1;
  /** Every accepted version's schema, the current one included. */
  versions: ReadonlyMap<number, StandardSchemaV1>;
  aggregateType: string | undefined;
  targets: readonly TargetConfig[];
  description: string | undefined;
  jsonSchema: Record<string, unknown> | undefined;
}

function resolve(type: string, spec: unknown): ResolvedContract {
  const where = `events.${type}`;
  if (isStandardSchema(spec)) {
    return {
      type,
      version: 1,
      schema: spec,
      versions: new Map([[1, spec]]),
      aggregateType: undefined,
      targets: [],
      description: undefined,
      jsonSchema: undefined,
    };
  }
  const c = spec as Partial<EventContract> | null;
  if (typeof c !== 'object' || c === null || !isStandardSchema(c.schema)) {
    throw new ConfigError(
      where,
      'expected a Standard Schema validator (zod, valibot, ArkType...) or { schema, version?, previous?, aggregateType?, targets? }',
    );
  }
  const version = c.version ?? 1;
  if (!Number.isSafeInteger(version) || version < 1) {
    throw new ConfigError(`${where}.version`, `expected a whole number from 1 (got ${String(c.version)})`);
  }
  const versions = new Map<number, StandardSchemaV1>([[version, c.schema]]);
  for (const [key, schema] of Object.entries(c.previous ?? {})) {
    const n = Number(key);
    if (!Number.isSafeInteger(n) || n < 1 || n >= version) {
      throw new ConfigError(`${where}.previous.${key}`, `expected an earlier version than ${version}`);
    }
    if (!isStandardSchema(schema)) {
      throw new ConfigError(`${where}.previous.${key}`, 'expected a Standard Schema validator');
    }
    versions.set(n, schema);
  }
  if (c.aggregateType !== undefined && (typeof c.aggregateType !== 'string' || c.aggregateType === '')) {
    throw new ConfigError(`${where}.aggregateType`, 'expected a non-empty string');
  }
  let targets: TargetConfig[] = [];
  if (c.targets !== undefined) {
    const parsed = routesSchema.safeParse([{ match: type, targets: c.targets }]);
    if (!parsed.success) {
      throw new ConfigError(`${where}.targets`, parsed.error.issues.map((i) => i.message).join('; '));
    }
    targets = parsed.data[0]?.targets ?? [];
  }
  return {
    type,
    version,
    schema: c.schema,
    versions,
    aggregateType: c.aggregateType,
    targets,
    description: c.description,
    jsonSchema: c.jsonSchema,
  };
}

async function check(
  schema: StandardSchemaV1,
  value: unknown,
): Promise<{ value: unknown } | { issues: ReadonlyArray<StandardSchemaV1.Issue> }> {
  const result = await schema['~standard'].validate(value);
  return result.issues ? { issues: result.issues } : { value: result.value };
}

/**
 * One typed definition of each event type, for both sides: producers write
 * through it ({@link EventContracts.enqueue}, checked at compile time and,
 * before the INSERT, at run time), consumers handle through it
 * ({@link EventContracts.handlers}, each payload checked against the schema
 * of its version before the handler runs), and the CLI publishes it as JSON
 * Schema and AsyncAPI (`pg-lambda-outbox contracts`).
 */
const BRAND = Symbol.for('pg-lambda-outbox.event-contracts');

/** True for what {@link defineEvents} returns, also from another copy of this package. */
export function isEventContracts(value: unknown): value is EventContracts<Record<string, EventSpec>> {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
}

export class EventContracts<Defs extends Record<string, EventSpec>> {
  private readonly byType: ReadonlyMap<string, ResolvedContract>;
  readonly [BRAND] = true;

  constructor(defs: Defs) {
    if (typeof defs !== 'object' || defs === null || Object.keys(defs).length === 0) {
      throw new ConfigError('events', 'expected at least one event type');
    }
    this.byType = new Map(Object.entries(defs).map(([type, spec]) => [type, resolve(type, spec)]));
  }

  /** The resolved contracts, in definition order. */
  list(): ResolvedContract[] {
    return [...this.byType.values()];
  }

  get(type: string): ResolvedContract | undefined {
    return this.byType.get(type);
  }

  /** Routes for the relay from the contracts that name targets (one route per event type). */
  routes(): RouteConfig[] {
    return this.list()
      .filter((c) => c.targets.length > 0)
      .map((c) => ({ match: c.type, targets: [...c.targets] }));
  }

  /**
   * Checks a payload against the current version's schema; returns the
   * schema's output. A failure is a {@link ValidationError} naming the event
   * type, the version and the path (`field`: `payload.<path>`).
   */
  async validate<T extends keyof Defs & string>(
    type: T,
    payload: PayloadInput<Defs[T]>,
  ): Promise<StandardSchemaV1.InferOutput<SchemaOf<Defs[T]>>> {
    return (await this.checkPayload('', this.contractOf('', type), payload)).output as never;
  }

  /**
   * Writes one event of `type` on `db` (inside the caller's transaction),
   * after checking its payload: a payload that breaks the contract throws a
   * {@link ValidationError} naming the event type and the path, and nothing
   * is written. The event carries its contract version (the
   * `event-version` header). Returns the event id.
   *
   * @example
   * await withTransaction(pool, async (client) => {
   *   await client.query('INSERT INTO orders ...');
   *   await events.enqueue(client, 'order.created', { aggregateId: orderId, payload: { orderId, totalCents } });
   * });
   */
  async enqueue<T extends keyof Defs & string>(
    db: Queryable,
    type: T,
    event: ContractEventInput<Defs[T]>,
    options?: EnqueueOptions,
  ): Promise<string> {
    const prepared = await this.prepare('', { ...event, type } as TypedEventInput<Defs>);
    const [id] = await enqueueEvents(db, [prepared], options);
    return id as string;
  }

  /** Writes several events, each checked first; all or nothing. Returns their ids in order. */
  async enqueueMany(
    db: Queryable,
    events: readonly TypedEventInput<Defs>[],
    options?: EnqueueOptions,
  ): Promise<string[]> {
    if (!Array.isArray(events)) throw new ValidationError('events', 'must be an array');
    const prepared: NewOutboxEvent[] = [];
    for (const [i, event] of events.entries()) prepared.push(await this.prepare(`events[${i}]`, event));
    return enqueueEvents(db, prepared, options);
  }

  private contractOf(at: string, type: unknown): ResolvedContract {
    const contract = typeof type === 'string' ? this.byType.get(type) : undefined;
    if (!contract) {
      throw new ValidationError(
        at === '' ? 'type' : `${at}.type`,
        `no contract for event type ${JSON.stringify(type)} (known: ${[...this.byType.keys()].join(', ')})`,
      );
    }
    return contract;
  }

  /**
   * The payload as the consumer will see it, JSON, checked against the
   * current version's schema: what passes here passes in the consumer's
   * handlers. Returns that JSON value (what is stored) and the schema's output.
   */
  private async checkPayload(
    at: string,
    contract: ResolvedContract,
    payload: unknown,
  ): Promise<{ json: unknown; output: unknown }> {
    const field = (name: string) => (at === '' ? name : `${at}.${name}`);
    // What cannot be JSON (a BigInt, a cycle) is refused with its path, as enqueue does.
    const json: unknown = JSON.parse(serializePayload(field('payload'), payload).json);
    const checked = await check(contract.schema, json);
    if ('issues' in checked) {
      const [first, ...rest] = checked.issues.map(describeIssue);
      // Valid as given but not as JSON: a type JSON does not have (a Date, a Map, a BigInt).
      const onlyAsJson = json !== payload && !('issues' in (await check(contract.schema, payload)));
      throw new ValidationError(
        field(first?.path ?? 'payload'),
        `${contract.type} v${contract.version}: ${first?.kind ?? 'invalid'}${moreIssues(rest)}${
          onlyAsJson
            ? ' (the payload is valid as given but not as the JSON the consumer receives: use a schema for its JSON form, e.g. an ISO date string instead of a Date)'
            : ''
        }`,
      );
    }
    return { json, output: checked.value };
  }

  private async prepare(at: string, event: TypedEventInput<Defs>): Promise<NewOutboxEvent> {
    const field = (name: string) => (at === '' ? name : `${at}.${name}`);
    const contract = this.contractOf(at, event?.type);
    const checked = { value: (await this.checkPayload(at, contract, event.payload)).json };
    const aggregateType = event.aggregateType ?? contract.aggregateType;
    if (aggregateType === undefined) {
      throw new ValidationError(
        field('aggregateType'),
        `required: the contract of ${contract.type} names no aggregateType`,
      );
    }
    const out: NewOutboxEvent = {
      aggregateType,
      aggregateId: event.aggregateId,
      eventType: contract.type,
      payload: checked.value,
      headers: { ...event.headers, [VERSION_HEADER]: String(contract.version) },
    };
    if (event.id !== undefined) out.id = event.id;
    if (event.trace !== undefined) out.trace = event.trace;
    return out;
  }

  /**
   * Consumer handlers typed by the contracts, for `createConsumer`'s
   * `handlers`. Before a handler runs, the event's version (the
   * `event-version` header, 1 when absent) is looked up among the versions
   * its contract accepts and its payload checked against that version's
   * schema; a payload that breaks it fails its record alone with a
   * {@link ContractViolationError} (not retryable: after its receives the
   * queue moves it to its dead-letter queue), and the handler never sees it.
   * The handler gets the schema's output and `event.version`.
   *
   * @example
   * const consumer = createConsumer({ name: 'billing', pool, handlers: events.handlers({
   *   'order.created': async (event, tx) => { event.payload.totalCents; // typed },
   * }) });
   */
  handlers(handlers: ContractHandlers<Defs>): Record<string, EventHandler> {
    const out: Record<string, EventHandler> = {};
    for (const [type, handler] of Object.entries(handlers) as Array<[string, ContractHandler<unknown>]>) {
      const contract = this.byType.get(type);
      if (!contract) {
        throw new ConfigError(
          `handlers.${type}`,
          `no contract for this event type (known: ${[...this.byType.keys()].join(', ')})`,
        );
      }
      if (typeof handler !== 'function') {
        throw new ConfigError(
          `handlers.${type}`,
          'expected a function (event, tx, context) => Promise<void>',
        );
      }
      out[type] = async (event, tx, context) => {
        const raw = event.headers?.[VERSION_HEADER];
        const version = raw === undefined ? 1 : Number(raw);
        const schema = Number.isSafeInteger(version) ? contract.versions.get(version) : undefined;
        if (!schema) {
          throw new ContractViolationError(
            type,
            undefined,
            `headers.${VERSION_HEADER}`,
            `version ${headerValue(raw)} is not one this consumer accepts (${[...contract.versions.keys()].sort((a, b) => a - b).join(', ')})`,
          );
        }
        const checked = await check(schema, event.payload);
        if ('issues' in checked) {
          const issues = checked.issues.map(describeIssue);
          const [first, ...rest] = issues;
          throw new ContractViolationError(
            type,
            version,
            first?.path ?? 'payload',
            `${first?.kind ?? 'invalid'}${moreIssues(rest)}`,
            issues,
          );
        }
        await handler({ ...event, payload: checked.value, version } as ContractEvent<unknown>, tx, context);
      };
    }
    return out;
  }
}

/**
 * Defines the contracts of a service's event types once, for producers,
 * consumers and the published schema. A contract is a Standard Schema
 * validator (zod, valibot, ArkType, ...), or `{ schema, version, previous,
 * aggregateType, targets, description }`.
 *
 * @example
 * import { z } from 'zod';
 * export const events = defineEvents({
 *   'order.created': { schema: z.object({ orderId: z.uuid(), totalCents: z.int() }), aggregateType: 'order' },
 *   'order.cancelled': z.object({ orderId: z.uuid(), reason: z.string().optional() }),
 * });
 */
export function defineEvents<const Defs extends Record<string, EventSpec>>(defs: Defs): EventContracts<Defs> {
  return new EventContracts(defs);
}
