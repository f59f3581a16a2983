import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { migrationSql } from '../../db/migrate.js';
import { print, schemaOf } from '../shared.js';

/**
 * For teams whose schema changes go through their own migration tool: the
 * package's migrations as plain SQL, each with a header comment naming it, on
 * stdout or one file per migration. Needs no database.
 */
export function sqlCommand(cli: Command): void {
  cli
    .command('sql')
    .description(
      "print the SQL of the outbox's migrations in order, for your own migration tool (no database needed)",
    )
    .option('--after <migration>', 'only the migrations after this one (the last one your tool has applied)')
    .option('--out <dir>', 'write one file per migration, <name>.sql, into this folder instead')
    .action(async (options: { after?: string; out?: string }, command: Command) => {
      const schema = schemaOf(command);
      const migrations = await migrationSql({ schema, after: options.after });
      if (migrations.length === 0) {
        process.stderr.write(`no migrations after ${options.after}: up to date\n`);
        return;
      }
      if (options.out === undefined) {
        print(migrations.map((m) => m.sql.trimEnd()).join('\n\n'));
        return;
      }
      await mkdir(options.out, { recursive: true });
      for (const m of migrations) {
        const file = path.join(options.out, `${m.name}.sql`);
        await writeFile(file, m.sql);
        print(file);
      }
    });
}
