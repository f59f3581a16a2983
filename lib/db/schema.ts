import { ConfigError } from '../errors.js';

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
