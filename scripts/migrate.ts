import { Command } from 'commander';
import pg from 'pg';
import { migrate, setNotifyTrigger } from '../lib/db/migrate.js';

const program = new Command()
  .name('npm run migrate --')
  .description(
    'Apply pending migrations from migrations/ to DATABASE_URL (safe to run from several processes at once).',
  )
  .option('--notify', 'enable the NOTIFY trigger on outbox_events (for relays with OUTBOX_LISTEN=true)')
  .option('--no-notify', 'disable the NOTIFY trigger (behind RDS Proxy)')
  .parse();

const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) {
  console.error(
    'DATABASE_URL is not set. Example: DATABASE_URL=postgres://user@host:5432/db npm run migrate',
  );
  process.exit(2);
}

try {
  const ran = await migrate({ databaseUrl, log: (line) => console.log(line) });
  console.log(ran.length ? `applied: ${ran.join(', ')}` : 'schema is up to date');
  const notify = program.getOptionValueSource('notify') === 'cli' ? program.opts().notify : undefined;
  if (notify !== undefined) {
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    await setNotifyTrigger(client, notify);
    await client.end();
    console.log(`NOTIFY trigger ${notify ? 'enabled' : 'disabled'}`);
  }
} catch (error) {
  console.error(`migration failed: ${(error as Error).message}`);
  process.exit(1);
}
