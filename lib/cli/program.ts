import fs from 'node:fs';
import { Command, CommanderError } from 'commander';
import { MIGRATE_FROM_CODE, SCHEMA_WAYS } from '../db/schema.js';
import { ConfigError, OutboxSchemaError, ValidationError } from '../errors.js';
import { oneLine, printable } from '../operations/text-table.js';
import { consoleCommand } from './commands/console.js';
import { contractsCommand } from './commands/contracts.js';
import { deadLettersCommand } from './commands/dead-letters.js';
import { migrateCommand } from './commands/migrate.js';
import { discardCommand, redriveCommand } from './commands/redrive.js';
import { replayCommand } from './commands/replay.js';
import { replaysCommand } from './commands/replays.js';
import { sqlCommand } from './commands/sql.js';
import { statusCommand } from './commands/status.js';
import { CLI_NAME, DEFAULT_STATEMENT_TIMEOUT_SECONDS, wholeNumber } from './shared.js';

/**
 * The `pg-lambda-outbox` command: operate the outbox (status, dead letters,
 * redrive, discard, replay) and manage its tables (sql, migrate).
 *
 * Each command is one file under commands/ that adds itself to the program;
 * a new command is a new file and one entry in {@link COMMANDS}. Exit codes:
 * 0 ok, 1 failure (e.g. database unreachable), 2 bad usage or input; the
 * reason is one line on stderr.
 */
export const COMMANDS: ReadonlyArray<(cli: Command) => void> = [
  statusCommand,
  deadLettersCommand,
  redriveCommand,
  discardCommand,
  replayCommand,
  replaysCommand,
  sqlCommand,
  migrateCommand,
  contractsCommand,
  consoleCommand,
];

const EXIT_FAILURE = 1;
const EXIT_USAGE = 2;

/** Library fields as the CLI spells them, so an error points at the flag to fix. */
const FLAGS: Record<string, string> = {
  ids: '--id',
  eventType: '--type',
  aggregateType: '--aggregate-type',
  aggregateId: '--aggregate-id',
  deadLetteredAfter: '--after',
  deadLetteredBefore: '--before',
  publishedAfter: '--published-after',
  publishedBefore: '--published-before',
  createdAfter: '--created-after',
  createdBefore: '--created-before',
  limit: '--limit',
  all: '--all',
};

/** The package's version, from its package.json (beside lib/ and dist/ alike). */
function packageVersion(): string {
  const file = new URL('../../package.json', import.meta.url);
  return (JSON.parse(fs.readFileSync(file, 'utf8')) as { version: string }).version;
}

/** The command tree; exported for tests that want to parse without a child process. */
export function program(): Command {
  const cli = new Command()
    .name(CLI_NAME)
    .description('Operate the transactional outbox and manage its tables (connects with DATABASE_URL)')
    .option(
      '--schema <name>',
      "schema of the outbox tables (default: $OUTBOX_SCHEMA, else the connection's search_path)",
    )
    .option(
      '--statement-timeout <seconds>',
      `longest any one query may run, 1-86400 (default ${DEFAULT_STATEMENT_TIMEOUT_SECONDS}; migrate is not bound)`,
      wholeNumber(86_400),
    )
    .version(packageVersion(), '-V, --version', 'print the version of pg-lambda-outbox')
    .configureHelp({ showGlobalOptions: true })
    .showSuggestionAfterError()
    // One line, like every other error here: commander puts "(Did you mean ...?)" on a line of its own.
    .configureOutput({ outputError: (text, write) => write(`${text.trimEnd().replace(/\s*\n\s*/g, ' ')}\n`) })
    .exitOverride();
  // Added after the settings above, so every command inherits them (one-line
  // errors, suggestions, no process.exit).
  for (const add of COMMANDS) add(cli);
  return cli;
}

/**
 * A library error about an input field, in the CLI's words: the flag instead
 * of the field (`--id: must be a UUID`), and flags wherever the message
 * names fields (`pass at least one of --id, --type, ... or --all`). Quoted
 * text (a value echoed back) is left as it is.
 */
export function inFlags(error: ValidationError): string {
  const field = error.field.replace(/\[\d+\]$/, '');
  const text = error.message
    .slice(error.field.length + 2)
    .split(/("(?:[^"\\]|\\.)*")/)
    .map((part, i) =>
      i % 2 === 1
        ? part
        : part
            .replace(/\ball: true\b/g, '--all')
            .replace(/\b[a-z][A-Za-z]*\b/g, (w) => (w === 'all' ? w : (FLAGS[w] ?? w))),
    )
    .join('');
  // "no filter given; pass ... or --all" needs no field in front.
  if (field === 'all') return text;
  return `${FLAGS[field] ?? error.field}: ${text}`;
}

/** One line an operator can act on, whatever was thrown. */
function describe(error: unknown): string {
  if (error instanceof ValidationError) return inFlags(error);
  if (error instanceof OutboxSchemaError) {
    return error.message
      .replace(SCHEMA_WAYS, '--schema <name> or OUTBOX_SCHEMA')
      .replace(MIGRATE_FROM_CODE, '');
  }
  const e = error as NodeJS.ErrnoException & { errors?: Error[] };
  // Node reports a refused connection to several addresses as an AggregateError with no message.
  const message =
    e?.message || e?.errors?.map((inner) => inner.message).join('; ') || e?.code || String(error);
  if (e?.code && ['ECONNREFUSED', 'ENOTFOUND', 'ETIMEDOUT', 'EHOSTUNREACH'].includes(e.code)) {
    return `cannot reach the database in DATABASE_URL: ${message}`;
  }
  return oneLine(message, 500);
}

/** Runs the CLI on `argv` (as `process.argv`) and returns the exit code. */
export async function main(argv: string[]): Promise<number> {
  try {
    await program().parseAsync(argv);
    return 0;
  } catch (error) {
    // Commander has already printed its own one-line message (or the help).
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : EXIT_USAGE;
    // The reason may quote the database (a constraint's detail): escaped like stdout.
    process.stderr.write(`error: ${printable(describe(error), 'cell')}\n`);
    return error instanceof ValidationError || error instanceof ConfigError ? EXIT_USAGE : EXIT_FAILURE;
  }
}
