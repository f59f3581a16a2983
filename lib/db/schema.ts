import { ConfigError, OutboxSchemaError } from '../errors.js';

/**
 * The outbox's tables, views and function as SQL names: unqualified (found
 * through the connection's `search_path`, as installs before the schema
 * option have them) or qualified with the schema a team chose for them
 * (`"outbox".outbox_events`).
 */
export interface OutboxTables {
  /** The schema, or undefined for unqualified names. */
  readonly schema: string | undefined;
  readonly events: string;
  readonly processedEvents: string;
  readonly processedEventReplays: string;
  readonly aggregateLocks: string;
  readonly replays: string;
  readonly relaySlots: string;
  readonly relayWake: string;
  readonly deadLettersView: string;
  readonly discardedView: string;
}

/** PostgreSQL's identifier limit (NAMEDATALEN - 1), in bytes. */
const MAX_IDENTIFIER_BYTES = 63;

/** A double-quoted identifier: any name is safe inside, case and all. */
export function quoteIdentifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * Letters, digits, `_` and `$`, not starting with a digit: a name every
 * migration tool writes the same way, quoted or not (node-pg-migrate, for
 * one, does not escape quotes inside a schema name).
 */
const SCHEMA_NAME = /^[A-Za-z_][A-Za-z0-9_$]*$/;

/**
 * Checks a schema name given as an option or environment variable and
 * returns it (undefined stays undefined: the unqualified default). The name is
 * used as it is written, quoted: `Outbox` and `outbox` are two schemas.
 */
export function validateSchemaName(schema: unknown, field = 'schema'): string | undefined {
  if (schema === undefined) return undefined;
  if (typeof schema !== 'string' || schema === '') {
    throw new ConfigError(
      field,
      `expected a schema name (a non-empty string), got ${JSON.stringify(schema)}`,
    );
  }
  if (Buffer.byteLength(schema) > MAX_IDENTIFIER_BYTES) {
    throw new ConfigError(
      field,
      `schema name longer than PostgreSQL's ${MAX_IDENTIFIER_BYTES} bytes: ${schema}`,
    );
  }
  if (!SCHEMA_NAME.test(schema)) {
    throw new ConfigError(
      field,
      `expected a schema name of letters, digits, "_" and "$", not starting with a digit: ${JSON.stringify(schema)}`,
    );
  }
  if (schema.toLowerCase().startsWith('pg_')) {
    throw new ConfigError(field, `schema names starting with "pg_" are reserved by PostgreSQL: ${schema}`);
  }
  return schema;
}

const cache = new Map<string | undefined, OutboxTables>();

/** The outbox's SQL names in `schema` (validated), or unqualified without one. */
export function outboxTables(schema?: string): OutboxTables {
  let tables = cache.get(schema);
  if (!tables) {
    const valid = validateSchemaName(schema);
    const name = (table: string) => (valid === undefined ? table : `${quoteIdentifier(valid)}.${table}`);
    tables = Object.freeze({
      schema: valid,
      events: name('outbox_events'),
      processedEvents: name('processed_events'),
      processedEventReplays: name('processed_event_replays'),
      aggregateLocks: name('outbox_aggregate_locks'),
      replays: name('outbox_replays'),
      relaySlots: name('outbox_relay_slots'),
      relayWake: name('outbox_relay_wake'),
      deadLettersView: name('outbox_dead_letters'),
      discardedView: name('outbox_discarded_events'),
    });
    cache.set(schema, tables);
  }
  return tables;
}

/**
 * SQL statements built once per schema: `const sql = perSchema((t) => ({
 * INSERT: `INSERT INTO ${t.events} ...` }))`, then `sql(schema).INSERT`.
 */
export function perSchema<S>(build: (tables: OutboxTables) => S): (schema?: string) => S {
  const built = new Map<string | undefined, S>();
  return (schema) => {
    let statements = built.get(schema);
    if (statements === undefined) {
      statements = build(outboxTables(schema));
      built.set(schema, statements);
    }
    return statements;
  };
}

/**
 * The schema an entry point uses: `schema` when given (validated), else the
 * `OUTBOX_SCHEMA` environment variable, else undefined (unqualified names,
 * found through the connection's `search_path`). Unset and empty are the
 * same, as for the relay (`schemaVar`).
 */
export function resolveSchema(
  schema: string | undefined,
  env: Record<string, string | undefined> = process.env,
): string | undefined {
  if (schema !== undefined) return validateSchemaName(schema);
  const value = env.OUTBOX_SCHEMA;
  return value === undefined || value === '' ? undefined : validateSchemaName(value, 'OUTBOX_SCHEMA');
}

/**
 * The SQLSTATE and message of a database error, under the wrappers ORMs put
 * around it: `cause` (Drizzle), `driverError` (TypeORM), and Prisma's
 * `meta.driverAdapterError.cause` (`originalCode`, `originalMessage`).
 */
function databaseError(error: unknown, depth = 0): { code: string; message: string } | undefined {
  if (depth > 4 || typeof error !== 'object' || error === null) return undefined;
  const e = error as {
    code?: unknown;
    message?: unknown;
    cause?: unknown;
    driverError?: unknown;
    meta?: { driverAdapterError?: { cause?: { originalCode?: unknown; originalMessage?: unknown } } };
  };
  const prisma = e.meta?.driverAdapterError?.cause;
  if (typeof prisma?.originalCode === 'string') {
    return { code: prisma.originalCode, message: String(prisma.originalMessage ?? '') };
  }
  if (typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code)) {
    return { code: e.code, message: typeof e.message === 'string' ? e.message : '' };
  }
  return databaseError(e.driverError, depth + 1) ?? databaseError(e.cause, depth + 1);
}

/** The ways to say the schema, and to migrate, that an OutboxSchemaError names (the CLI names its flag instead). */
export const SCHEMA_WAYS = 'createOutbox({ schema }), the schema option, or OUTBOX_SCHEMA';
export const MIGRATE_FROM_CODE = ' (or migrate({ schema }))';

/**
 * `error` as an {@link OutboxSchemaError} when it is PostgreSQL's "no such
 * relation" (42P01) or "no such column" (42703), else `error` itself. Only
 * for errors of the outbox's own statements: the message blames the
 * outbox's schema. It names the relation or column and the fix, never the
 * statement.
 */
export function schemaError(error: unknown, schema: string | undefined): unknown {
  if (error instanceof OutboxSchemaError) return error;
  const found = databaseError(error);
  if (found?.code !== '42P01' && found?.code !== '42703') return error;
  const missing = /"([^"]+)"/.exec(found.message)?.[1];
  const where =
    schema === undefined
      ? "no schema was given, so the outbox's tables were looked up through the connection's search_path"
      : `looked in schema "${schema}"`;
  const migrate = `npx pg-lambda-outbox migrate --schema ${schema ?? '<name>'}`;
  const say = `give the outbox's schema once: ${SCHEMA_WAYS}`;
  const message =
    found.code === '42P01'
      ? `outbox table ${missing ?? '(unnamed)'} not found (${where}): ${say}; ` +
        `if the outbox was never migrated there, run \`${migrate}\`${MIGRATE_FROM_CODE}`
      : `outbox column ${missing ?? '(unnamed)'} not found (${where}): ` +
        (schema === undefined
          ? `the table found is not the outbox's (one of your own with the same name?); ${say}, ` +
            `after \`${migrate}\` if the outbox has no schema of its own yet`
          : `the outbox's migrations are behind this version: run \`${migrate}\`${MIGRATE_FROM_CODE}`);
  return new OutboxSchemaError(message, {
    cause: error,
    schema,
    missing,
    code: found.code,
  });
}

/** Runs `work`, turning a missing outbox table or column into an {@link OutboxSchemaError}. */
export async function withSchemaErrors<T>(schema: string | undefined, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw schemaError(error, schema);
  }
}
