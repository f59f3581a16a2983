import type { Command } from 'commander';
import { outboxStats } from '../../operations/reads.js';
import { humanDuration, textTable } from '../../operations/text-table.js';
import { print, printJson, schemaOf, withPool } from '../shared.js';

export function statusCommand(cli: Command): void {
  cli
    .command('status')
    .description('pending, leased and backing-off events, dead letters, age of the oldest pending event')
    .option('--json', 'print JSON')
    .action(async (options: { json?: boolean }, command: Command) => {
      const schema = schemaOf(command);
      const stats = await withPool(command, (pool) => outboxStats(pool, { schema }));
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
    });
}
