import type { Command } from 'commander';
import pg from 'pg';
import { migrate, setNotifyTrigger } from '../../db/migrate.js';
import { printable } from '../../operations/text-table.js';
import { databaseUrl, print, schemaOf } from '../shared.js';

/**
 * Applies the package's pending migrations (node-pg-migrate, an optional
 * peer: `npm i node-pg-migrate`). Safe to run from several processes at once.
 * A schema that already holds tables of the same names that migrate() did not
 * create is refused before anything runs (migrate.ts names `--schema`).
 */
export function migrateCommand(cli: Command): void {
  cli
    .command('migrate')
    .description(
      'apply pending migrations to DATABASE_URL (needs node-pg-migrate; safe to run from several processes at once)',
    )
    .option('--notify', 'enable the NOTIFY trigger on outbox_events (for relays with OUTBOX_LISTEN=true)')
    .option('--no-notify', 'disable the NOTIFY trigger (behind RDS Proxy)')
    .option('--verbose', "the migration library's log, with each migration's SQL, on stderr")
    .action(async (options: { notify?: boolean; verbose?: boolean }, command: Command) => {
      const url = databaseUrl();
      const schema = schemaOf(command);
      const where = schema === undefined ? '' : ` in schema ${schema}`;
      // stdout carries the result only; the library's log (SQL included) is asked for.
      const log = options.verbose
        ? (line: string) => process.stderr.write(`${printable(line)}\n`)
        : undefined;
      const ran = await migrate({ databaseUrl: url, schema, log });
      print(ran.length > 0 ? `applied${where}: ${ran.join(', ')}` : `outbox tables${where} are up to date`);
      if (options.notify === undefined) return;
      const client = new pg.Client({ connectionString: url, application_name: 'pg-lambda-outbox' });
      await client.connect();
      try {
        await setNotifyTrigger(client, options.notify, { schema });
      } finally {
        await client.end();
      }
      print(`NOTIFY trigger ${options.notify ? 'enabled' : 'disabled'}`);
    });
}
