import type { Command } from 'commander';
import { listDeadLetters } from '../../operations/reads.js';
import { oneLine, textTable } from '../../operations/text-table.js';
import type { DeadLetterPage } from '../../sql/list-dead-letters.js';
import { print, printJson, schemaOf, wholeNumber, withPool } from '../shared.js';

export const deadLetterCount = (n: number) => `${n} dead letter${n === 1 ? '' : 's'}`;

/** `3 dead letters`, or `10,000+ dead letters` when the count stopped at its cap. */
const pageCount = (page: DeadLetterPage) =>
  page.totalCapped ? `${page.total.toLocaleString('en-US')}+ dead letters` : deadLetterCount(page.total);

export function deadLettersCommand(cli: Command): void {
  cli
    .command('dead-letters')
    .description('list dead letters, oldest first, with the reason they failed')
    .option('--type <eventType>', 'only this event type')
    .option('--limit <n>', 'most rows to list (1-10000)', wholeNumber(10_000), 50)
    .option('--json', 'print JSON (full error texts)')
    .action(async (options: { type?: string; limit: number; json?: boolean }, command: Command) => {
      const schema = schemaOf(command);
      const page = await withPool(command, (pool) =>
        listDeadLetters(pool, { limit: options.limit, eventType: options.type, schema }),
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
      print(`\n${page.rows.length} of ${pageCount(page)} (oldest first; --json shows full errors)`);
    });
}
