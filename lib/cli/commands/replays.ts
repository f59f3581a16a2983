import type { Command } from 'commander';
import { listReplays } from '../../operations/reads.js';
import { oneLine, textTable } from '../../operations/text-table.js';
import { print, printJson, schemaOf, wholeNumber, withPool } from '../shared.js';

export function replaysCommand(cli: Command): void {
  cli
    .command('replays')
    .description('the latest replays, newest first: who, when, filter, how many, how many still waiting')
    .option('--limit <n>', 'most rows to list (1-1000)', wholeNumber(1000), 20)
    .option('--json', 'print JSON')
    .action(async (options: { limit: number; json?: boolean }, command: Command) => {
      const schema = schemaOf(command);
      const rows = await withPool(command, (pool) => listReplays(pool, { limit: options.limit, schema }));
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
    });
}
