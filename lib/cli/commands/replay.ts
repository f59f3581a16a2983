import os from 'node:os';
import type { Command } from 'commander';
import { type ReplayResult, replayEvents } from '../../operations/replay.js';
import type { ReplayInput } from '../../operations/replay-input.js';
import {
  collect,
  given,
  operator,
  osUser,
  print,
  printJson,
  schemaOf,
  wholeNumber,
  withPool,
} from '../shared.js';

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

export function replayCommand(cli: Command): void {
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
    .action(async (flags: ReplayFlags, command: Command) => {
      const schema = schemaOf(command);
      const input: ReplayInput = given({
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
      });
      const result = await withPool(command, (pool) =>
        replayEvents(pool, input, {
          caller: { via: 'cli', os_user: osUser() ?? null, host: os.hostname(), pid: process.pid },
          schema,
        }),
      );
      if (flags.json) return printJson(result);
      print(describeReplay(result));
    });
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
