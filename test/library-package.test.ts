// The package as a user gets it: `npm pack` (which builds dist/), then a
// scratch project outside the repository installs the tarball from the
// registry's point of view (its dependencies come from npm, nothing from this
// checkout), type-checks a program against the shipped declarations with its
// own TypeScript, and runs the compiled JavaScript: migrate, write an event in
// a transaction, relay it to a queue of the emulator, consume it.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { awsClients, createQueue, uniqueName } from './support/aws.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-library-'));
const project = path.join(work, 'shop');

/** The version this checkout resolved, so the scratch project installs what the tests ran against. */
const versionOf = (name: string): string =>
  JSON.parse(fs.readFileSync(path.join(root, 'node_modules', name, 'package.json'), 'utf8')).version;

const npmEnv = { ...process.env, NPM_CONFIG_UPDATE_NOTIFIER: 'false', NPM_CONFIG_FUND: 'false' };

// What a user writes: only the package's entry points, never a path inside it.
const PROGRAM = `
import { randomUUID } from 'node:crypto';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { type Envelope, enqueueEvent, MIGRATIONS_DIR, migrate, ValidationError, withTransaction } from 'pg-lambda-outbox';
import { createConsumer, defineHandlers } from 'pg-lambda-outbox/consumer';
import { createAwsPublisher, parseRoutes, Relay } from 'pg-lambda-outbox/relay';

interface OrderPlaced {
  orderId: string;
  totalCents: number;
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(\`\${name} is not set\`);
  return value;
}

const databaseUrl = required('DATABASE_URL');
const queueUrl = required('QUEUE_URL');

const applied = await migrate({ databaseUrl });
const pool = new pg.Pool({ connectionString: databaseUrl });
await pool.query('CREATE TABLE shop_orders (id uuid PRIMARY KEY, total_cents bigint NOT NULL)');
await pool.query('CREATE TABLE shop_receipts (order_id uuid PRIMARY KEY, event_id uuid NOT NULL)');

// Producer: the order and its event commit together.
const orderId = randomUUID();
const eventId = await withTransaction(pool, async (client) => {
  await client.query('INSERT INTO shop_orders (id, total_cents) VALUES ($1, $2)', [orderId, 4200]);
  return enqueueEvent(client, {
    aggregateType: 'order',
    aggregateId: orderId,
    eventType: 'order.placed',
    payload: { orderId, totalCents: 4200 } satisfies OrderPlaced,
  });
});

// The declarations are real: a call missing required fields does not compile.
// @ts-expect-error aggregateId, eventType and payload are required
const incomplete: Parameters<typeof enqueueEvent>[1] = { aggregateType: 'order' };
let refusedField = '';
try {
  await enqueueEvent(pool, incomplete);
} catch (error) {
  if (error instanceof ValidationError) refusedField = error.field;
}

// Relay: SDK clients from the environment (AWS_ENDPOINT_URL points at the emulator).
const publisher = createAwsPublisher({
  routes: parseRoutes([{ match: 'order.*', targets: [{ type: 'sqs', queueUrl }] }]),
  sqs: new SQSClient({}),
  eventBridge: new EventBridgeClient({}),
  source: 'shop',
  concurrency: 2,
});
const relay = new Relay({ db: pool, publisher, options: { safetyMarginMs: 0, idleWaitMs: 20 } });
const relayed = await relay.run({ remainingMs: () => 60_000, stopWhenIdle: true });

// Consumer: the message as Lambda's SQS event source would deliver it.
const received = await new SQSClient({}).send(
  new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 5 }),
);
const seen: Array<Envelope<OrderPlaced>> = [];
const handlers = defineHandlers<{ 'order.placed': OrderPlaced }>({
  'order.placed': async (event, tx) => {
    seen.push(event);
    await tx.query('INSERT INTO shop_receipts (order_id, event_id) VALUES ($1, $2)', [
      event.payload.orderId,
      event.id,
    ]);
  },
});
const consumer = createConsumer({ name: 'shop-consumer', pool, handlers });
const sqsEvent: Parameters<typeof consumer.handleSqsEvent>[0] = {
  Records: (received.Messages ?? []).map((message) => ({
    messageId: message.MessageId ?? '',
    receiptHandle: message.ReceiptHandle ?? '',
    body: message.Body ?? '',
    attributes: {
      ApproximateReceiveCount: '1',
      SentTimestamp: String(Date.now()),
      SenderId: 'shop',
      ApproximateFirstReceiveTimestamp: String(Date.now()),
    },
    messageAttributes: {},
    md5OfBody: message.MD5OfBody ?? '',
    eventSource: 'aws:sqs',
    eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:shop-orders',
    awsRegion: 'us-east-1',
  })),
};
const first = await consumer.handleSqsEvent(sqsEvent);
const again = await consumer.handleSqsEvent(sqsEvent);

// Only the entry points are importable.
const internal = 'pg-lambda-outbox/dist/outbox/enqueue.js';
const internalImport = await import(internal).then(
  () => 'imported',
  (error: NodeJS.ErrnoException) => error.code,
);

await pool.end();
console.log(
  JSON.stringify({
    applied,
    migrationsDir: MIGRATIONS_DIR,
    eventId,
    refusedField,
    published: relayed.published,
    received: sqsEvent.Records.length,
    first: { processed: first.processed, failed: first.failed },
    again: { processed: again.processed, duplicates: again.duplicates },
    seen: seen.map((event) => ({ id: event.id, type: event.type, payload: event.payload })),
    internalImport,
  }),
);
`;

const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    lib: ['ES2023'],
    types: ['node'],
    strict: true,
    // Check the shipped declarations too, not only the program.
    skipLibCheck: false,
    rootDir: 'src',
    outDir: 'build',
  },
  include: ['src'],
};

let db: TestDatabase;
let queueUrl = '';
beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
  queueUrl = (await createQueue(awsClients().sqs, uniqueName('library'))).url;
});
afterAll(async () => {
  await db?.drop();
  fs.rmSync(work, { recursive: true, force: true });
});

describe('the packed library', () => {
  it('installs into a project outside the repository, type-checks, writes an event and consumes it', () => {
    // npm pack runs prepack (npm run build): the tarball holds the fresh dist/.
    execFileSync('npm', ['pack', '--pack-destination', work], { cwd: root, env: npmEnv, stdio: 'pipe' });
    const { version } = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
    const tarball = path.join(work, `pg-lambda-outbox-${version}.tgz`);
    expect(fs.existsSync(tarball), tarball).toBe(true);
    const files = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).trim().split('\n');
    expect(files).toContain('package/dist/index.js');
    expect(files).toContain('package/dist/index.d.ts');
    expect(files).toContain('package/dist/consumer/index.d.ts');
    expect(files).toContain('package/migrations/1764460800000_outbox-events.sql');
    expect(files.filter((f) => /^package\/(lib|functions|test|scripts|bench)\//.test(f))).toEqual([]);

    fs.mkdirSync(path.join(project, 'src'), { recursive: true });
    fs.writeFileSync(
      path.join(project, 'package.json'),
      JSON.stringify({ name: 'shop', version: '1.0.0', private: true, type: 'module' }, null, 2),
    );
    fs.writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify(TSCONFIG, null, 2));
    fs.writeFileSync(path.join(project, 'src', 'main.ts'), PROGRAM);
    execFileSync(
      'npm',
      [
        'install',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
        tarball,
        `typescript@${versionOf('typescript')}`,
        `@types/node@${versionOf('@types/node')}`,
        `pg@${versionOf('pg')}`,
        `@aws-sdk/client-sqs@${versionOf('@aws-sdk/client-sqs')}`,
        `@aws-sdk/client-eventbridge@${versionOf('@aws-sdk/client-eventbridge')}`,
      ],
      { cwd: project, env: npmEnv, stdio: 'pipe' },
    );

    // The scratch project's own tsc: a type error fails the test with tsc's output.
    try {
      execFileSync(path.join(project, 'node_modules', '.bin', 'tsc'), ['-p', project], {
        cwd: project,
        encoding: 'utf8',
        stdio: 'pipe',
      });
    } catch (error) {
      const { stdout, stderr } = error as { stdout: string; stderr: string };
      expect.fail(`tsc in the scratch project failed:\n${stdout}${stderr}`);
    }

    const output = execFileSync(process.execPath, [path.join(project, 'build', 'main.js')], {
      cwd: project,
      encoding: 'utf8',
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: db.url,
        QUEUE_URL: queueUrl,
        AWS_ENDPOINT_URL: inject('awsEndpoint'),
        AWS_REGION: 'us-east-1',
        AWS_ACCESS_KEY_ID: 'test',
        AWS_SECRET_ACCESS_KEY: 'test',
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
      },
    });
    const result = JSON.parse(output.trim().split('\n').pop() as string);

    expect(result.applied).toContain('1764460800000_outbox-events');
    // migrate() found the migrations shipped in the installed package.
    expect(fs.realpathSync(result.migrationsDir)).toBe(
      fs.realpathSync(path.join(project, 'node_modules', 'pg-lambda-outbox', 'migrations')),
    );
    expect(result.refusedField).toBe('events[0].aggregateId');
    expect(result.published).toBe(1);
    expect(result.received).toBe(1);
    expect(result.first).toEqual({ processed: 1, failed: 0 });
    expect(result.again).toEqual({ processed: 0, duplicates: 1 });
    expect(result.seen).toEqual([
      {
        id: result.eventId,
        type: 'order.placed',
        payload: { orderId: expect.any(String), totalCents: 4200 },
      },
    ]);
    expect(result.internalImport).toBe('ERR_PACKAGE_PATH_NOT_EXPORTED');
  }, 240_000);

  it('recorded the consumed event in processed_events and the handler wrote in its transaction', async () => {
    const processed = await db.pool.query('SELECT consumer, event_id FROM processed_events');
    const receipts = await db.pool.query('SELECT event_id FROM shop_receipts');
    expect(processed.rows).toHaveLength(1);
    expect(processed.rows[0].consumer).toBe('shop-consumer');
    expect(receipts.rows).toEqual([{ event_id: processed.rows[0].event_id }]);
  });
});
