/**
 * What every command shares: the database from `DATABASE_URL`, the global
 * `--schema`, output, and the option parsers. A command file takes what it
 * needs from here and adds one subcommand to the program.
 */
import fs from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { type Command, InvalidArgumentError } from 'commander';
import pg from 'pg';
import { schemaVar } from '../config/env.js';
import { checkConnectionString } from '../db/connection-config.js';
import { validateSchemaName } from '../db/schema.js';
import { ConfigError } from '../errors.js';
import { printable } from '../operations/text-table.js';

/** The name the package's `bin` installs, used in help and error texts. */
export const CLI_NAME = 'pg-lambda-outbox';

/**
 * `DATABASE_URL`, checked: unset or not a connection URL is a one-line
 * error saying what to set (never the value: it may hold a password).
 */
export function databaseUrl(env: NodeJS.ProcessEnv = process.env, inRepository = inThisRepository()): string {
  const url = env.DATABASE_URL?.trim();
  if (!url) {
    throw new ConfigError(
      'DATABASE_URL',
      `is not set; point it at the outbox database, e.g. DATABASE_URL=postgres://user:password@host:5432/database npx ${CLI_NAME} status${inRepository ? ' (`npm start` prints the URL of the local stack)' : ''}`,
    );
  }
  checkConnectionString(url, 'DATABASE_URL');
  return url;
}

/**
 * True when the command runs from this package's own repository (its
 * sources beside scripts/start.ts), where `npm start` runs the local stack;
 * an installed package ships no scripts/, so a user never sees that hint.
 */
export function inThisRepository(): boolean {
  return fs.existsSync(fileURLToPath(new URL('../../scripts/start.ts', import.meta.url)));
}

/**
 * The schema of the outbox tables: `--schema` (given before or after the
 * command), else `OUTBOX_SCHEMA`, else none (the connection's `search_path`).
 */
export function schemaOf(command: Command): string | undefined {
  const flag = command.optsWithGlobals<{ schema?: string }>().schema;
  if (flag !== undefined) return validateSchemaName(flag, '--schema');
  return schemaVar(process.env);
}

/** Seconds any one query of a command may take, unless `--statement-timeout` says otherwise. */
export const DEFAULT_STATEMENT_TIMEOUT_SECONDS = 30;

/**
 * A pool of one connection for the length of a command. Its queries are cut
 * off after `--statement-timeout` seconds (default 30): a command run
 * against a large outbox ends with an error rather than holding a scan open.
 */
export async function withPool<T>(command: Command, fn: (pool: pg.Pool) => Promise<T>): Promise<T> {
  const seconds =
    command.optsWithGlobals<{ statementTimeout?: number }>().statementTimeout ??
    DEFAULT_STATEMENT_TIMEOUT_SECONDS;
  const pool = new pg.Pool({
    connectionString: databaseUrl(),
    max: 1,
    connectionTimeoutMillis: 5_000,
    statement_timeout: seconds * 1000,
    application_name: CLI_NAME,
  });
  // An idle client dropped by the server must not crash the process with an unhandled 'error'.
  pool.on('error', () => {});
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}

/**
 * Writes a line to stdout with control characters escaped (`\u001b`):
 * strings from the database must not drive the operator's terminal. Tab and
 * newline pass; in JSON output the escapes mean the same characters.
 */
export function print(text: string): void {
  process.stdout.write(`${printable(text)}\n`);
}

export const printJson = (value: unknown) => print(JSON.stringify(value, null, 2));

/** An option parser for a whole number; with `max` > 0, also 1 to `max`. */
export function wholeNumber(max: number) {
  return (value: string): number => {
    if (!/^\d+$/.test(value)) throw new InvalidArgumentError('expected a whole number.');
    const n = Number(value);
    if (max > 0 && (n < 1 || n > max)) throw new InvalidArgumentError(`expected a number from 1 to ${max}.`);
    return n;
  };
}

/** A repeatable option's values. */
export const collect = (value: string, previous: string[] = []) => [...previous, value];

export function osUser(): string | undefined {
  try {
    return os.userInfo().username;
  } catch {
    return undefined;
  }
}

/** Who ran the command, as recorded with a redrive, discard or replay. */
export function operator(): string {
  const user = osUser();
  return user ? `cli:${user}@${os.hostname()}` : `cli:${os.hostname()}`;
}

/** The input without the flags that were not given (the library counts given filters). */
export function given<T extends object>(input: T): T {
  return Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)) as T;
}
