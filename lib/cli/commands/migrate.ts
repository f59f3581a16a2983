import type { Command } from 'commander';
import pg from 'pg';
import { migrate, setNotifyTrigger } from '../../db/migrate.js';
import { databaseUrl, print, schemaOf } from '../shared.js';

/**
 * Applies the package's pending migrations (node-pg-migrate, an optional
 * peer: `npm i node-pg-migrate`). Safe to run from several processes at once.
 */
export function migrateCommand(cli: Command): void {
  cli
    .command('migrate')
    .description(
      'apply pending migrations to DATABASE_URL (needs node-pg-migrate; safe to run from several processes at once)',
    )
    .option('--notify', 'enable the NOTIFY trigger on outbox_events (for relays with OUTBOX_LISTEN=true)')
    .option('--no-notify', 'disable the NOTIFY trigger (behind RDS Proxy)')
    .action(async (options: { notify?: boolean }, command: Command) => {
      const url = databaseUrl();
      const schema = schemaOf(command);
      const where = schema === undefined ? '' : ` in schema ${schema}`;
      const ran = await migrate({ databaseUrl: url, schema, log: print });
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
