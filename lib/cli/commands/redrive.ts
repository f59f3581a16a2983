import type { Command } from 'commander';
import type { Pool } from 'pg';
import { ValidationError } from '../../errors.js';
import { type RedriveResult, redriveDeadLetters } from '../../operations/redrive.js';
import type { RedriveInput } from '../../operations/redrive-input.js';
import { collect, given, operator, print, printJson, schemaOf, wholeNumber, withPool } from '../shared.js';
import { deadLetterCount } from './dead-letters.js';

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

type Action = 'redrive' | 'discard';

/** redrive and discard take the same filters; only the verb differs. */
function deadLetterCommand(cli: Command, action: Action, description: string, verb: string, noun: string) {
  cli
    .command(action)
    .description(description)
    .option('--id <uuid>', 'event id (repeatable)', collect)
    .option('--type <eventType>', 'event type')
    .option('--aggregate-type <type>', 'aggregate type')
    .option('--aggregate-id <id>', 'aggregate id')
    .option('--after <iso>', 'dead-lettered at or after (ISO 8601 with offset, e.g. 2025-01-31T12:00:00Z)')
    .option('--before <iso>', 'dead-lettered before (ISO 8601 with offset)')
    .option('--limit <n>', `most rows to ${verb} (default 100, at most 10000)`, wholeNumber(0))
    .option('--all', 'allow an empty filter: every dead letter, up to --limit')
    .option('--dry-run', `show what would be ${noun}; change nothing`)
    .option('--json', 'print JSON')
    .action(async (flags: RedriveFlags, command: Command) => {
      const schema = schemaOf(command);
      const input: RedriveInput = given({
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
      });
      const result = await withPool(command, async (pool) => {
        if (flags.id) await refuseUnknownIds(pool, input, flags.id, { schema }, noun);
        return redriveDeadLetters(pool, input, { schema });
      });
      if (flags.json) return printJson(result);
      print(describeRedrive(result));
    });
}

/**
 * `--id` names dead letters: one that is not (no such event, or it is
 * pending, published or discarded) refuses the whole command before
 * anything changes, instead of "0 matched" and exit 0. A dry run of the
 * same filter, without --limit, tells which.
 */
async function refuseUnknownIds(
  pool: Pool,
  input: RedriveInput,
  ids: readonly string[],
  options: { schema: string | undefined },
  noun: string,
): Promise<void> {
  // The discard's dry run lists every match (a redrive's leaves out busy aggregates).
  const { limit: _, ...filter } = input;
  const found = await redriveDeadLetters(pool, { ...filter, action: 'discard', dryRun: true }, options);
  const known = new Set(found.ids);
  const unknown = [...new Set(ids.map((id) => id.toLowerCase()))].filter((id) => !known.has(id));
  if (unknown.length === 0) return;
  const filters = Object.keys(input).some((key) => FILTERS.has(key)) ? ' and the other filters' : '';
  throw new ValidationError(
    'ids',
    `no dead letter${filters} matches ${unknown.join(', ')} (no such event, or it is pending, published or discarded: see dead-letters); nothing was ${noun}`,
  );
}

/** Filters besides `ids` that narrow what an id may match. */
const FILTERS = new Set([
  'eventType',
  'aggregateType',
  'aggregateId',
  'deadLetteredAfter',
  'deadLetteredBefore',
]);

export function redriveCommand(cli: Command): void {
  deadLetterCommand(
    cli,
    'redrive',
    'move dead letters back to pending; try --dry-run first',
    'reset',
    'reset',
  );
}

export function discardCommand(cli: Command): void {
  deadLetterCommand(
    cli,
    'discard',
    'finish dead letters without publishing them (releases an aggregate held in ordered mode); try --dry-run first',
    'discard',
    'discarded',
  );
}

function describeRedrive(result: RedriveResult): string {
  const lines: string[] = [];
  const beyond = result.matched - result.ids.length - result.busy;
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
  if (result.busy > 0) {
    lines.push(
      `${deadLetterCount(result.busy)} left as they are: a relay was publishing (or a producer writing) an event of their aggregate; run again for them.`,
    );
  }
  if (beyond > 0)
    lines.push(`${beyond} more match beyond the limit; run again (or raise --limit) for the rest.`);
  return lines.join('\n');
}
