/**
 * Operator CLI for the outbox: `npm run outbox -- <command>`.
 *
 *   status                          pending, leased, backing off, dead letters, blocked aggregates, oldest pending age
 *   dead-letters [--type] [--limit] dead letters with the reason they failed
 *   redrive <filters> [--dry-run]   dead letters back to pending (same rules as the redrive function)
 *   discard <filters> [--dry-run]   dead letters finished without publishing (releases their aggregate)
 *   replay <filters> [--dry-run]    republish published events (audited in outbox_replays)
 *   replays [--limit]               the latest replays: who, when, filter, how many, still waiting
 *
 * Every command takes `--json`. Connects with DATABASE_URL. Exit codes: 0 ok,
 * 1 failure (e.g. database unreachable), 2 bad usage or input; the reason is
 * one line on stderr.
 */
import os from 'node:os';
import { pathToFileURL } from 'node:url';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import pg from 'pg';
import { ConfigError, ValidationError } from '../lib/errors.js';
import { type RedriveInput, type RedriveResult, redriveDeadLetters } from '../lib/operations/redrive.js';
import { type ReplayInput, type ReplayResult, replayEvents } from '../lib/operations/replay.js';
import { humanDuration, oneLine, textTable } from '../lib/operations/text-table.js';
import { listDeadLetters } from '../lib/sql/list-dead-letters.js';
import { outboxStats } from '../lib/sql/outbox-stats.js';
import { listReplays } from '../lib/sql/replay-events.js';

const EXIT_FAILURE = 1;
const EXIT_USAGE = 2;

/** Redrive fields as the CLI spells them, so a validation error points at the flag to fix. */
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

function databaseUrl(env: NodeJS.ProcessEnv): string {
  const url = env.DATABASE_URL?.trim();
  if (!url) {
    throw new ConfigError(
      'DATABASE_URL',
      'is not set; point it at the outbox database, e.g. DATABASE_URL=postgres://user@host:5432/db npm run outbox -- status (`npm start` prints the URL of the local stack)',
    );
  }
  return url;
}

async function withPool<T>(fn: (pool: pg.Pool) => Promise<T>): Promise<T> {
  const pool = new pg.Pool({
    connectionString: databaseUrl(process.env),
    max: 1,
    connectionTimeoutMillis: 5_000,
    application_name: 'outbox-cli',
  });
  // An idle client dropped by the server must not crash the process with an unhandled 'error'.
  pool.on('error', () => {});
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}

function print(text: string): void {
  process.stdout.write(`${text}\n`);
}
const printJson = (value: unknown) => print(JSON.stringify(value, null, 2));
const deadLetterCount = (n: number) => `${n} dead letter${n === 1 ? '' : 's'}`;

function wholeNumber(max: number) {
  return (value: string): number => {
    if (!/^\d+$/.test(value)) throw new InvalidArgumentError('expected a whole number.');
    const n = Number(value);
    if (max > 0 && (n < 1 || n > max)) throw new InvalidArgumentError(`expected a number from 1 to ${max}.`);
    return n;
  };
}

const collect = (value: string, previous: string[] = []) => [...previous, value];

function osUser(): string | undefined {
  try {
    return os.userInfo().username;
  } catch {
    return undefined;
  }
}

function operator(): string {
  const user = osUser();
  return user ? `cli:${user}@${os.hostname()}` : `cli:${os.hostname()}`;
}

async function status(options: { json?: boolean }) {
  const stats = await withPool((pool) => outboxStats(pool));
  if (options.json) return printJson(stats);
  print(
    textTable(
      ['state', 'events'],
      [
        ['pending', String(stats.pending)],
        ['  leased (being published)', String(stats.leased)],
        ['  backing off (will retry)', String(stats.backingOff)],
        ['dead letters', String(stats.deadLetters)],
        ['  aggregates held back (ordered, block)', String(stats.blockedAggregates)],
      ],
    ),
  );
  print(
    `\noldest pending: ${stats.pending === 0 ? 'none' : `${humanDuration(stats.oldestPendingAgeSeconds)} old`}`,
  );
}

async function deadLetters(options: { type?: string; limit: number; json?: boolean }) {
  const page = await withPool((pool) =>
    listDeadLetters(pool, { limit: options.limit, eventType: options.type }),
  );
  if (options.json) return printJson(page);
  if (page.total === 0) return print(`no dead letters${options.type ? ` of type ${options.type}` : ''}`);
  print(
    textTable(
      ['id', 'event type', 'aggregate', 'attempts', 'redrives', 'dead-lettered at', 'last error'],
      page.rows.map((r) => [
        r.id,
        r.eventType,
        `${r.aggregateType}:${r.aggregateId}`,
        String(r.attempts),
        String(r.redriveCount),
        r.deadLetteredAt.toISOString(),
        oneLine(r.lastError ?? '', 100),
      ]),
    ),
  );
  print(`\n${page.rows.length} of ${deadLetterCount(page.total)} (oldest first; --json shows full errors)`);
}

interface RedriveFlags {
  id?: string[];
  type?: string;
  aggregateType?: string;
  aggregateId?: string;
  after?: string;
  before?: string;
  limit?: number;
  all?: boolean;
  dryRun?: boolean;
  json?: boolean;
}

async function redrive(flags: RedriveFlags, action: 'redrive' | 'discard' = 'redrive') {
  const input: RedriveInput = {
    action,
    ids: flags.id,
    eventType: flags.type,
    aggregateType: flags.aggregateType,
    aggregateId: flags.aggregateId,
    deadLetteredAfter: flags.after,
    deadLetteredBefore: flags.before,
    limit: flags.limit,
    all: flags.all,
    dryRun: flags.dryRun,
    requestedBy: operator(),
  };
  const defined = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined));
  const result = await withPool((pool) => redriveDeadLetters(pool, defined));
  if (flags.json) return printJson(result);
  print(describeRedrive(result));
}

function describeRedrive(result: RedriveResult): string {
  const lines: string[] = [];
  const beyond = result.matched - result.ids.length;
  if (result.action === 'discard') {
    lines.push(
      result.dryRun
        ? `dry run: matched ${deadLetterCount(result.matched)}; ${result.ids.length} would be discarded (never published). Nothing was changed.`
        : `discarded ${deadLetterCount(result.discarded)} (${result.matched} matched): finished without being published; their aggregates are released.`,
    );
  } else if (result.dryRun) {
    lines.push(
      `dry run: matched ${deadLetterCount(result.matched)}; ${result.ids.length} would be reset. Nothing was changed.`,
    );
  } else {
    lines.push(
      `reset ${deadLetterCount(result.reset)} to pending (${result.matched} matched); the relay publishes them on its next run.`,
    );
  }
  lines.push(...result.ids.map((id) => `  ${id}`));
  if (beyond > 0)
    lines.push(`${beyond} more match beyond the limit; run again (or raise --limit) for the rest.`);
  return lines.join('\n');
}

interface ReplayFlags {
  id?: string[];
  type?: string;
  aggregateType?: string;
  aggregateId?: string;
  publishedAfter?: string;
  publishedBefore?: string;
  createdAfter?: string;
  createdBefore?: string;
  limit?: number;
  all?: boolean;
  dryRun?: boolean;
  json?: boolean;
}

const eventCount = (n: number) => `${n} event${n === 1 ? '' : 's'}`;

async function replay(flags: ReplayFlags) {
  const input: ReplayInput = {
    ids: flags.id,
    eventType: flags.type,
    aggregateType: flags.aggregateType,
    aggregateId: flags.aggregateId,
    publishedAfter: flags.publishedAfter,
    publishedBefore: flags.publishedBefore,
    createdAfter: flags.createdAfter,
    createdBefore: flags.createdBefore,
    limit: flags.limit,
    all: flags.all,
    dryRun: flags.dryRun,
    requestedBy: operator(),
  };
  const defined = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined));
  const result = await withPool((pool) =>
    replayEvents(pool, defined, {
      caller: { via: 'cli', os_user: osUser() ?? null, host: os.hostname(), pid: process.pid },
    }),
  );
  if (flags.json) return printJson(result);
  print(describeReplay(result));
}

function describeReplay(result: ReplayResult): string {
  const lines = [
    result.dryRun
      ? `dry run: matched ${eventCount(result.matched)}; ${result.ids.length} would be replayed. Nothing was changed.`
      : `replay ${result.replayId}: ${eventCount(result.replayed)} back to pending (${result.matched} matched); the relay republishes them on its next run, marked with the replay id.`,
    ...result.ids.map((id) => `  ${id}`),
  ];
  if (result.busy > 0) {
    lines.push(
      `${eventCount(result.busy)} left as they are: a relay was publishing an event of their aggregate; run again for them.`,
    );
  }
  const beyond = result.matched - result.ids.length - result.busy;
  if (beyond > 0)
    lines.push(`${beyond} more match beyond the limit; run again (or raise --limit) for the rest.`);
  return lines.join('\n');
}

async function replays(options: { limit: number; json?: boolean }) {
  const rows = await withPool((pool) => listReplays(pool, { limit: options.limit }));
  if (options.json) return printJson({ replays: rows });
  if (rows.length === 0) return print('no replays');
  print(
    textTable(
      ['replay id', 'requested at', 'requested by', 'matched', 'replayed', 'waiting', 'filter'],
      rows.map((r) => [
        r.id,
        r.requestedAt.toISOString(),
        r.requestedBy,
        String(r.matched),
        String(r.replayed),
        String(r.waiting),
        oneLine(JSON.stringify(r.filter), 100),
      ]),
    ),
  );
}

/** The command tree; exported for tests that want to parse without a child process. */
export function program(): Command {
  const cli = new Command()
    .name('outbox')
    .description('Operate the transactional outbox (connects with DATABASE_URL)')
    .showSuggestionAfterError()
    // One line, like every other error here: commander puts "(Did you mean ...?)" on a line of its own.
    .configureOutput({ outputError: (text, write) => write(`${text.trimEnd().replace(/\s*\n\s*/g, ' ')}\n`) })
    .exitOverride();

  cli
    .command('status')
    .description('pending, leased and backing-off events, dead letters, age of the oldest pending event')
    .option('--json', 'print JSON')
    .action(status);

  cli
    .command('dead-letters')
    .description('list dead letters, oldest first, with the reason they failed')
    .option('--type <eventType>', 'only this event type')
    .option('--limit <n>', 'most rows to list (1-10000)', wholeNumber(10_000), 50)
    .option('--json', 'print JSON (full error texts)')
    .action(deadLetters);

  // redrive and discard take the same filters; only the verb differs.
  const filtered = (command: Command, verb: string, noun: string) =>
    command
      .option('--id <uuid>', 'event id (repeatable)', collect)
      .option('--type <eventType>', 'event type')
      .option('--aggregate-type <type>', 'aggregate type')
      .option('--aggregate-id <id>', 'aggregate id')
      .option('--after <iso>', 'dead-lettered at or after (ISO 8601 with offset, e.g. 2025-01-31T12:00:00Z)')
      .option('--before <iso>', 'dead-lettered before (ISO 8601 with offset)')
      .option('--limit <n>', `most rows to ${verb} (default 100, at most 10000)`, wholeNumber(0))
      .option('--all', 'allow an empty filter: every dead letter, up to --limit')
      .option('--dry-run', `show what would be ${noun}; change nothing`)
      .option('--json', 'print JSON');

  filtered(
    cli.command('redrive').description('move dead letters back to pending; try --dry-run first'),
    'reset',
    'reset',
  ).action((flags: RedriveFlags) => redrive(flags));

  filtered(
    cli
      .command('discard')
      .description(
        'finish dead letters without publishing them (releases an aggregate held in ordered mode); try --dry-run first',
      ),
    'discard',
    'discarded',
  ).action((flags: RedriveFlags) => redrive(flags, 'discard'));

  cli
    .command('replay')
    .description(
      'republish events that were already published (the relay sends them again, marked as a replay); audited; try --dry-run first',
    )
    .option('--id <uuid>', 'event id (repeatable)', collect)
    .option('--type <eventType>', 'event type')
    .option('--aggregate-type <type>', 'aggregate type')
    .option('--aggregate-id <id>', 'aggregate id')
    .option('--published-after <iso>', 'first published at or after (ISO 8601 with offset)')
    .option('--published-before <iso>', 'first published before (ISO 8601 with offset)')
    .option('--created-after <iso>', 'written at or after (ISO 8601 with offset)')
    .option('--created-before <iso>', 'written before (ISO 8601 with offset)')
    .option('--limit <n>', 'most events to replay (default 100, at most 10000)', wholeNumber(0))
    .option('--all', 'allow an empty filter: every published event, up to --limit')
    .option('--dry-run', 'show what would be replayed; change nothing')
    .option('--json', 'print JSON')
    .action(replay);

  cli
    .command('replays')
    .description('the latest replays, newest first: who, when, filter, how many, how many still waiting')
    .option('--limit <n>', 'most rows to list (1-1000)', wholeNumber(1000), 20)
    .option('--json', 'print JSON')
    .action(replays);

  return cli;
}

/** One line an operator can act on, whatever was thrown. */
function describe(error: unknown): string {
  if (error instanceof ValidationError) {
    const flag = FLAGS[error.field.replace(/\[\d+\]$/, '')];
    return flag ? `${error.message} (${flag})` : error.message;
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

export async function main(argv: string[]): Promise<number> {
  try {
    await program().parseAsync(argv);
    return 0;
  } catch (error) {
    // Commander has already printed its own one-line message (or the help).
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : EXIT_USAGE;
    process.stderr.write(`error: ${describe(error)}\n`);
    return error instanceof ValidationError || error instanceof ConfigError ? EXIT_USAGE : EXIT_FAILURE;
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await main(process.argv);
}
