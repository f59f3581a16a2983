// The package as a team adopts it: `npm pack` (which builds dist/), then a
// scratch project outside the repository, whose database already has its own
// `orders`, `order_notifications` and an unrelated `outbox_events`, installs
// the tarball with pg and the libraries it already uses (nothing from this
// checkout), type-checks a program against the shipped declarations with its
// own TypeScript (skipLibCheck off), and runs it: migrate into schema
// `outbox`, say that schema once (createOutbox) and write an order and its
// event through each of Drizzle, Kysely, Knex, TypeORM and Prisma 7 (its
// client generated offline, on the pg driver adapter; commit and rollback),
// relay with the container runner to a queue of the emulator, consume with a
// poller whose handler writes through an ORM, read the outbox's status
// through the same handle; where the schema is not said, the error names
// where it looked and the fix. Then the package's command, `npx
// pg-lambda-outbox`, reads the same outbox. Nothing of the service's own
// tables may change but its own writes.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { awsClients, createQueue, uniqueName } from './support/aws.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-adoption-'));
const project = path.join(work, 'shop');

/** The version this checkout resolved, so the scratch project installs what the tests ran against. */
const versionOf = (name: string): string =>
  JSON.parse(fs.readFileSync(path.join(root, 'node_modules', name, 'package.json'), 'utf8')).version;

const npmEnv = { ...process.env, NPM_CONFIG_UPDATE_NOTIFIER: 'false', NPM_CONFIG_FUND: 'false' };

// The service's database before the outbox arrives.
const SERVICE_TABLES = `
  CREATE TABLE orders (id uuid PRIMARY KEY, orm text NOT NULL, total_cents bigint NOT NULL);
  CREATE TABLE order_notifications (order_id uuid NOT NULL, channel text NOT NULL);
  CREATE TABLE order_receipts (event_id uuid PRIMARY KEY, order_id uuid NOT NULL);
  CREATE TABLE outbox_events (msg_id serial PRIMARY KEY, topic text NOT NULL, body text);
  INSERT INTO orders VALUES ('00000000-0000-4000-8000-000000000001', 'legacy', 1);
  INSERT INTO order_notifications VALUES ('00000000-0000-4000-8000-000000000001', 'email');
  INSERT INTO outbox_events (topic, body) VALUES ('legacy', 'not ours');`;

// What a user writes: only the package's entry points, never a path inside it.
const PROGRAM = `
import { randomUUID } from 'node:crypto';
import { DeleteMessageBatchCommand, ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { PrismaPg } from '@prisma/adapter-pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigint, pgTable, text, uuid } from 'drizzle-orm/pg-core';
import knexFactory from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { createOutbox, enqueueEvent, migrate, OutboxSchemaError, ValidationError } from 'pg-lambda-outbox';
import { createConsumer, defineHandlers } from 'pg-lambda-outbox/consumer';
import { drizzleTx, fromDrizzle } from 'pg-lambda-outbox/drizzle';
import { fromKnex } from 'pg-lambda-outbox/knex';
import { fromKysely } from 'pg-lambda-outbox/kysely';
import { fromPrisma } from 'pg-lambda-outbox/prisma';
import { testOutbox } from 'pg-lambda-outbox/testing';
import { createAwsPublisher, parseRoutes, Relay, runRelay } from 'pg-lambda-outbox/relay';
import { fromTypeORM } from 'pg-lambda-outbox/typeorm';
import { DataSource } from 'typeorm';
import { PrismaClient } from './generated/prisma/client.js';

interface OrderPlaced {
  orderId: string;
  orm: string;
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(\`\${name} is not set\`);
  return value;
}

const databaseUrl = required('DATABASE_URL');
const queueUrl = required('QUEUE_URL');
const queueArn = required('QUEUE_ARN');
const schema = 'outbox';

const applied = await migrate({ databaseUrl, schema });
const pool = new pg.Pool({ connectionString: databaseUrl });
// The schema, said once for writes, the consumer and operations.
const outbox = createOutbox({ schema });

// The service's own data layer, one per library.
const orders = pgTable('orders', { id: uuid('id').primaryKey(), orm: text('orm').notNull(), totalCents: bigint('total_cents', { mode: 'number' }).notNull() });
const receipts = pgTable('order_receipts', { eventId: uuid('event_id').primaryKey(), orderId: uuid('order_id').notNull() });
interface Tables {
  orders: { id: string; orm: string; total_cents: number };
}
const drizzleDb = drizzle(pool);
const kysely = new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) });
const knex = knexFactory({ client: 'pg', connection: databaseUrl, pool: { min: 0, max: 2 } });
const dataSource = await new DataSource({ type: 'postgres', url: databaseUrl }).initialize();
const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });

const placed = (orderId: string, orm: string) => ({
  aggregateType: 'order',
  aggregateId: orderId,
  eventType: 'order.placed',
  payload: { orderId, orm } satisfies OrderPlaced,
});
class Abandon extends Error {}

// Each writes the order and its event in the library's own transaction; fail: throw after both.
const writers: Record<string, (orderId: string, fail: boolean) => Promise<void>> = {
  drizzle: (orderId, fail) =>
    drizzleDb.transaction(async (tx) => {
      await tx.insert(orders).values({ id: orderId, orm: 'drizzle', totalCents: 100 });
      await outbox.enqueue(fromDrizzle(tx), placed(orderId, 'drizzle'));
      if (fail) throw new Abandon();
    }),
  kysely: (orderId, fail) =>
    kysely.transaction().execute(async (trx) => {
      await trx.insertInto('orders').values({ id: orderId, orm: 'kysely', total_cents: 100 }).execute();
      await outbox.enqueue(fromKysely(trx), placed(orderId, 'kysely'));
      if (fail) throw new Abandon();
    }),
  knex: (orderId, fail) =>
    knex.transaction(async (trx) => {
      await trx('orders').insert({ id: orderId, orm: 'knex', total_cents: 100 });
      await outbox.enqueue(fromKnex(trx), placed(orderId, 'knex'));
      if (fail) throw new Abandon();
    }),
  typeorm: (orderId, fail) =>
    dataSource.transaction(async (manager) => {
      await manager.query('INSERT INTO orders (id, orm, total_cents) VALUES ($1, $2, $3)', [orderId, 'typeorm', 100]);
      await outbox.enqueue(fromTypeORM(manager), placed(orderId, 'typeorm'));
      if (fail) throw new Abandon();
    }),
  prisma: (orderId, fail) =>
    prisma.$transaction(async (tx) => {
      await tx.order.create({ data: { id: orderId, orm: 'prisma', totalCents: 100n } });
      await outbox.enqueue(fromPrisma(tx), placed(orderId, 'prisma'));
      if (fail) throw new Abandon();
    }),
};
const committed: string[] = [];
const abandoned: string[] = [];
for (const write of Object.values(writers)) {
  const kept = randomUUID();
  await write(kept, false);
  committed.push(kept);
  const dropped = randomUUID();
  await write(dropped, true).then(
    () => { throw new Error('the failing transaction committed'); },
    (error: unknown) => { if (!(error instanceof Abandon)) throw error; },
  );
  abandoned.push(dropped);
}

// The declarations are real: a call missing required fields does not compile.
// @ts-expect-error aggregateId, eventType and payload are required
const incomplete: Parameters<typeof enqueueEvent>[1] = { aggregateType: 'order' };
let refusedField = '';
await outbox.enqueue(pool, incomplete).catch((error: unknown) => {
  if (error instanceof ValidationError) refusedField = error.field;
});

// The schema not said: the service's own public.outbox_events is found
// through search_path, the outbox's lock table is not. The errors say so.
const notSaid = async (options: { lockAggregates?: boolean }) =>
  enqueueEvent(pool, placed(randomUUID(), 'unsaid'), options).then(
    () => 'written',
    (error: unknown) =>
      error instanceof OutboxSchemaError
        ? { code: error.code, schema: error.schema ?? null, missing: error.missing ?? null, message: error.message }
        : String(error),
  );
const unsaid = { table: await notSaid({}), column: await notSaid({ lockAggregates: false }) };

// Relay: the long-running runner a container would use; SQS-only routes need no EventBridge client.
const sqs = new SQSClient({});
const publisher = createAwsPublisher({
  routes: parseRoutes([{ match: 'order.*', targets: [{ type: 'sqs', queueUrl }] }]),
  sqs,
});
const stop = new AbortController();
const relayRelay = new Relay({ db: pool, publisher, options: { schema: outbox.schema, idleWaitMs: 50 } });
const relaying = runRelay({ relay: relayRelay, signal: stop.signal, runMs: 5_000 });

// Consumer: a poller outside Lambda, writing its receipt through Drizzle in the dedupe transaction.
const handlers = defineHandlers<{ 'order.placed': OrderPlaced }>({
  'order.placed': async (event, tx) => {
    await drizzleTx(tx).insert(receipts).values({ eventId: event.id, orderId: event.payload.orderId });
  },
});
const consumer = createConsumer({ outbox, name: 'shop', pool, handlers });
let consumed = 0;
let duplicates = 0;
const deadline = Date.now() + 60_000;
while (consumed < committed.length && Date.now() < deadline) {
  const { Messages: messages = [] } = await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: queueUrl,
      MaxNumberOfMessages: 10,
      WaitTimeSeconds: 1,
      MessageSystemAttributeNames: ['All'],
      MessageAttributeNames: ['All'],
    }),
  );
  if (messages.length === 0) continue;
  const result = await consumer.handleMessages(messages, { queueArn });
  consumed += result.processed;
  duplicates += result.duplicates;
  const failed = new Set(result.batchItemFailures.map((f) => f.itemIdentifier));
  const done = messages.filter((m) => !failed.has(m.MessageId ?? ''));
  if (done.length > 0) {
    await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: done.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle ?? '' })),
      }),
    );
  }
}
stop.abort();
const relayed = await relaying;

// The team's own test of its code, with no AWS: pg-lambda-outbox/testing
// drains the real relay into memory and feeds its consumer the messages.
const kitOrder = randomUUID();
await writers.kysely(kitOrder, false);
const seen: string[] = [];
const testConsumer = createConsumer({
  outbox,
  name: 'shop-tests',
  pool,
  handlers: defineHandlers<{ 'order.placed': OrderPlaced }>({
    'order.placed': async (event) => {
      seen.push(event.payload.orderId);
    },
  }),
});
const kit = testOutbox({ db: pool, outbox });
const drained = await kit.drain();
const delivered = await kit.deliver(testConsumer, drained);
const again = await kit.deliver(testConsumer, drained);
const testing = { kitOrder, drained: drained.messages.length, processed: delivered.processed, duplicates: again.duplicates, seen };
// An operation through the same handle.
const status = await outbox.status(pool);
const deadLetters = (await outbox.listDeadLetters(pool, { limit: 10 })).total;

// Only the entry points are importable.
const internal = 'pg-lambda-outbox/dist/outbox/enqueue.js';
const internalImport = await import(internal).then(
  () => 'imported',
  (error: NodeJS.ErrnoException) => error.code,
);

// kysely.destroy() ends the pool it was given, the one the outbox shares.
await prisma.$disconnect();
await Promise.all([kysely.destroy(), knex.destroy(), dataSource.destroy()]);
console.log(JSON.stringify({ applied, committed, abandoned, refusedField, unsaid, relayed, consumed, duplicates, status, deadLetters, internalImport, testing }));
`;

// The program is checked as ORM users must (drizzle-orm's own declarations
// do not pass skipLibCheck: false); the package's core entry points are
// checked with skipLibCheck off on their own, with only pg's and Node's types
// installed (no @types/aws-lambda, no EventBridge client, no zod: the package
// bundles its own and its declarations never name it).
const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    lib: ['ES2023'],
    types: ['node'],
    strict: true,
    skipLibCheck: true,
    rootDir: 'src',
    outDir: 'build',
  },
  include: ['src'],
};
const TSCONFIG_DECLARATIONS = {
  extends: './tsconfig.json',
  compilerOptions: { skipLibCheck: false, noEmit: true },
  include: [],
  files: ['src/entry-points.ts'],
};
const ENTRY_POINTS = `
export * as outbox from 'pg-lambda-outbox';
export * as consumer from 'pg-lambda-outbox/consumer';
export * as relay from 'pg-lambda-outbox/relay';
export * as operations from 'pg-lambda-outbox/operations';
export * as lambda from 'pg-lambda-outbox/lambda';
export * as contracts from 'pg-lambda-outbox/contracts';
export * as prisma from 'pg-lambda-outbox/prisma';
export * as testing from 'pg-lambda-outbox/testing';
export * as adminConsole from 'pg-lambda-outbox/console';
`;

// The service's Prisma schema: its own orders table. The client is generated
// offline (PRISMA_SCHEMA_ENGINE_BINARY: generate never runs that engine).
const PRISMA_SCHEMA = `
generator client {
  provider = "prisma-client"
  output   = "../src/generated/prisma"
}

datasource db {
  provider = "postgresql"
}

model Order {
  id         String @id @db.Uuid
  orm        String
  totalCents BigInt @map("total_cents")

  @@map("orders")
}
`;

let db: TestDatabase;
let queue = { url: '', arn: '' };
let tarball = '';
const serviceEnv = () => ({
  PATH: process.env.PATH,
  DATABASE_URL: db.url,
  AWS_ENDPOINT_URL: inject('awsEndpoint'),
  AWS_REGION: 'us-east-1',
  AWS_ACCESS_KEY_ID: 'test',
  AWS_SECRET_ACCESS_KEY: 'test',
  AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
  NPM_CONFIG_UPDATE_NOTIFIER: 'false',
});

/** The package's command, as the service runs it. */
const cli = (...args: string[]) =>
  execFileSync('npx', ['--no-install', 'pg-lambda-outbox', ...args], {
    cwd: project,
    encoding: 'utf8',
    env: serviceEnv(),
    stdio: 'pipe',
  });

beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
  await db.pool.query(SERVICE_TABLES);
  queue = await createQueue(awsClients().sqs, uniqueName('adoption'));
});
afterAll(async () => {
  await db?.drop();
  fs.rmSync(work, { recursive: true, force: true });
});

describe('adopting the packed library in an existing service', () => {
  let before: unknown;

  it('packs what a team needs and nothing of the repository', () => {
    // npm pack runs prepack (npm run build): the tarball holds the fresh dist/.
    execFileSync('npm', ['pack', '--pack-destination', work], { cwd: root, env: npmEnv, stdio: 'pipe' });
    const { version } = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
    tarball = path.join(work, `pg-lambda-outbox-${version}.tgz`);
    expect(fs.existsSync(tarball), tarball).toBe(true);
    const files = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).trim().split('\n');
    for (const file of [
      'dist/index.js',
      'dist/index.d.ts',
      'dist/consumer/index.d.ts',
      'dist/adapters/kysely.js',
      'dist/contracts/index.d.ts',
      'dist/cli/main.js',
      'dist/zod.js',
      'dist/console/assets/index.html',
      'dist/console/assets/vendor/uPlot.iife.min.js',
      'dist/console/assets/vendor/uPlot.LICENSE',
      'migrations/1764460800000_outbox-events.sql',
      'LICENSE',
      'README.md',
      'docs/migrations.md',
    ]) {
      expect(files).toContain(`package/${file}`);
    }
    // The reference stack's example tables are not the package's.
    expect(files.filter((f) => f.includes('migrations/example'))).toEqual([]);
    expect(files.filter((f) => /^package\/(lib|functions|test|scripts|bench)\//.test(f))).toEqual([]);
  });

  it("installs beside pg and the libraries the service already has, type-checks (the package's declarations with skipLibCheck off) and runs", async () => {
    const { rows } = await db.pool.query('SELECT * FROM public.orders ORDER BY id');
    before = rows;
    fs.mkdirSync(path.join(project, 'src'), { recursive: true });
    fs.writeFileSync(
      path.join(project, 'package.json'),
      JSON.stringify(
        {
          name: 'shop',
          version: '1.0.0',
          private: true,
          type: 'module',
          // Prisma's install scripts are not needed (the client runs on the pg
          // driver adapter) and are denied, as this repository does, for an npm
          // that enforces approvals (strict-allow-scripts, inherited from it here).
          allowScripts: { prisma: false, '@prisma/engines': false },
        },
        null,
        2,
      ),
    );
    fs.writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify(TSCONFIG, null, 2));
    fs.writeFileSync(path.join(project, 'src', 'main.ts'), PROGRAM);
    fs.writeFileSync(path.join(project, 'src', 'entry-points.ts'), ENTRY_POINTS);
    fs.writeFileSync(
      path.join(project, 'tsconfig.declarations.json'),
      JSON.stringify(TSCONFIG_DECLARATIONS, null, 2),
    );
    execFileSync(
      'npm',
      [
        'install',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
        tarball,
        ...[
          'typescript',
          '@types/node',
          'pg',
          '@types/pg',
          'node-pg-migrate',
          '@aws-sdk/client-sqs',
          'drizzle-orm',
          'kysely',
          'knex',
          'typeorm',
          'prisma',
          '@prisma/client',
          '@prisma/adapter-pg',
        ].map((name) => `${name}@${versionOf(name)}`),
      ],
      { cwd: project, env: npmEnv, stdio: 'pipe' },
    );
    fs.mkdirSync(path.join(project, 'prisma'));
    fs.writeFileSync(path.join(project, 'prisma', 'schema.prisma'), PRISMA_SCHEMA);
    execFileSync(path.join(project, 'node_modules', '.bin', 'prisma'), ['generate'], {
      cwd: project,
      env: { ...npmEnv, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false', CHECKPOINT_DISABLE: '1' },
      stdio: 'pipe',
    });

    // The scratch project's own tsc: a type error fails the test with tsc's output.
    for (const config of ['tsconfig.declarations.json', 'tsconfig.json']) {
      try {
        execFileSync(path.join(project, 'node_modules', '.bin', 'tsc'), ['-p', path.join(project, config)], {
          cwd: project,
          encoding: 'utf8',
          stdio: 'pipe',
        });
      } catch (error) {
        const { stdout, stderr } = error as { stdout: string; stderr: string };
        expect.fail(`tsc -p ${config} in the scratch project failed:\n${stdout}${stderr}`);
      }
    }

    const output = execFileSync(process.execPath, [path.join(project, 'build', 'main.js')], {
      cwd: project,
      encoding: 'utf8',
      env: { ...serviceEnv(), QUEUE_URL: queue.url, QUEUE_ARN: queue.arn },
    });
    const result = JSON.parse(output.trim().split('\n').pop() as string);

    expect(result.applied).toContain('1764460800000_outbox-events');
    expect(result.refusedField).toBe('events[0].aggregateId');
    // Not said: the missing lock table, then (without locks) the service's own table's missing column.
    expect(result.unsaid.table).toMatchObject({
      code: '42P01',
      schema: null,
      missing: 'outbox_aggregate_locks',
    });
    expect(result.unsaid.column).toMatchObject({ code: '42703', schema: null });
    for (const { message } of [result.unsaid.table, result.unsaid.column]) {
      expect(message).toMatch(/search_path/);
      expect(message).toMatch(/createOutbox\(\{ schema \}\)/);
      expect(message).toMatch(/migrate --schema/);
      expect(message).not.toMatch(/INSERT/);
    }
    expect(result.status).toMatchObject({ pending: 0, deadLetters: 0 });
    expect(result.deadLetters).toBe(0);
    expect(result.relayed).toMatchObject({ published: 5, deadLettered: 0 });
    expect(result.consumed).toBe(5);
    expect(result.internalImport).toBe('ERR_PACKAGE_PATH_NOT_EXPORTED');
    // The testing entry point: the order written after the relay stopped, drained and handled once.
    expect(result.testing).toMatchObject({ drained: 1, processed: 1, duplicates: 1 });
    expect(result.testing.seen).toEqual([result.testing.kitOrder]);
    const committed = [...result.committed, result.testing.kitOrder];

    // The service's tables: its own rows plus exactly the committed orders.
    const orders = await db.pool.query('SELECT id, orm FROM public.orders ORDER BY orm');
    expect(orders.rows.map((r) => r.id).sort()).toEqual(
      [...(before as Array<{ id: string }>).map((r) => r.id), ...committed].sort(),
    );
    expect(orders.rows.map((r) => r.orm)).toEqual([
      'drizzle',
      'knex',
      'kysely',
      'kysely',
      'legacy',
      'prisma',
      'typeorm',
    ]);
    expect((await db.pool.query('SELECT * FROM public.order_notifications')).rows).toHaveLength(1);
    expect((await db.pool.query('SELECT topic FROM public.outbox_events')).rows).toEqual([
      { topic: 'legacy' },
    ]);

    // The outbox, in its schema: the committed events published, none of the abandoned ones.
    const events = await db.pool.query(
      `SELECT aggregate_id, processed_at IS NOT NULL AS published FROM "outbox".outbox_events ORDER BY aggregate_id`,
    );
    expect(events.rows).toEqual([...committed].sort().map((id) => ({ aggregate_id: id, published: true })));
    const receipts = await db.pool.query('SELECT order_id FROM public.order_receipts ORDER BY order_id');
    expect(receipts.rows.map((r) => r.order_id)).toEqual([...result.committed].sort());
    const dedupe = await db.pool.query(
      `SELECT count(*)::int AS n FROM "outbox".processed_events WHERE consumer = 'shop'`,
    );
    expect(dedupe.rows[0].n).toBe(5);
  }, 300_000);

  it('npx pg-lambda-outbox reads the same outbox, prints the migrations and explains itself', () => {
    const status = JSON.parse(cli('--schema', 'outbox', 'status', '--json'));
    expect(status).toMatchObject({ pending: 0, deadLetters: 0 });
    expect(JSON.parse(cli('dead-letters', '--schema', 'outbox', '--json'))).toMatchObject({ total: 0 });
    const sql = cli('sql', '--schema', 'outbox');
    expect(sql).toContain('-- pg-lambda-outbox migration 1764460800000_outbox-events (schema "outbox")');
    expect(sql).toContain('CREATE TABLE outbox_events');
    expect(cli('migrate', '--schema', 'outbox')).toMatch(/up to date/);
    expect(cli('--help')).toMatch(/status[\s\S]*redrive[\s\S]*sql[\s\S]*migrate/);
    // Without --schema, migrate finds the service's own public.outbox_events:
    // it refuses before it runs anything, names the flag, and leaves nothing behind.
    const refused = (() => {
      try {
        return { status: 0, stdout: cli('migrate'), stderr: '' };
      } catch (error) {
        return error as { status: number; stdout: string; stderr: string };
      }
    })();
    expect(refused.status).toBe(2);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toMatch(/outbox_events[\s\S]*--schema/);
  });

  it('pg-lambda-outbox console serves its pages and uPlot from the package', async () => {
    // The installed bin itself (npx would stand between the signal and it).
    const bin = path.join(project, 'node_modules/.bin/pg-lambda-outbox');
    const child = spawn(bin, ['--schema', 'outbox', 'console', '--port', '0'], {
      cwd: project,
      env: serviceEnv(),
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    let stdout = '';
    child.stdout.on('data', (d) => {
      stdout += String(d);
    });
    try {
      const deadline = Date.now() + 30_000;
      const printed = /http:\/\/127\.0\.0\.1:\d+\/\?token=\S+/;
      while (!printed.test(stdout) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      const url = new URL(printed.exec(stdout)?.[0] ?? 'http://invalid/');
      const get = (p: string) =>
        fetch(new URL(p, url), { headers: { authorization: `Bearer ${url.searchParams.get('token')}` } });
      const page = await get('/');
      expect(page.headers.get('content-type')).toMatch(/^text\/html/);
      expect(await page.text()).toContain('app.js');
      for (const asset of ['/assets/app.js', '/assets/vendor/uPlot.iife.min.js', '/api/overview']) {
        expect((await get(asset)).status, asset).toBe(200);
      }
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
  }, 60_000);

  it('a refused migrate left no history table in public', async () => {
    const { rows } = await db.pool.query("SELECT to_regclass('public.outbox_migrations') AS t");
    expect(rows[0].t).toBeNull();
  });
});
