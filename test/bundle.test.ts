import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createOrder } from '../lib/example/orders.js';
import { ensureNode22, node22PathDir } from '../scripts/local/node22.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { toSqsEvent } from './support/sqs-event.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-bundle-'));
const db = useTestDatabase();
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

// The bundles run on Node 22, the major of the Lambda runtime (`nodejs22.x`),
// not on the Node that runs the tests; installed once into .local/node22.
let node22 = '';
beforeAll(() => {
  node22 = ensureNode22((line) => console.log(line));
}, 300_000);

/** Runs a packaged handler in a fresh Node 22 process, as the Lambda runtime would. */
function invoke(fn: string, event: unknown, env: Record<string, string>, budgetMs = 5000): unknown {
  const eventFile = path.join(work, `${fn}-event.json`);
  fs.writeFileSync(eventFile, JSON.stringify(event));
  const output = execFileSync(
    node22,
    [
      path.join(root, 'test/support/invoke-bundle.mjs'),
      path.join(work, fn, 'functions', `${fn}.mjs`),
      eventFile,
      String(budgetMs),
    ],
    {
      // Run from the bundle's folder, with no node_modules in reach: the zip must be self-contained.
      cwd: path.join(work, fn),
      env: {
        PATH: [node22PathDir(), process.env.PATH ?? ''].join(path.delimiter),
        AWS_ENDPOINT_URL: inject('awsEndpoint'),
        AWS_REGION: 'us-east-1',
        AWS_ACCESS_KEY_ID: 'test',
        AWS_SECRET_ACCESS_KEY: 'test',
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
        DATABASE_URL: db.url,
        POWERTOOLS_LOG_LEVEL: 'ERROR',
        POWERTOOLS_METRICS_DISABLED: 'true',
        ...env,
      },
      encoding: 'utf8',
    },
  );
  const { node, result } = JSON.parse(output.trim().split('\n').pop() as string);
  expect(node, `${fn} ran on ${node}`).toMatch(/^v22\./);
  return result;
}

describe('the packaged Lambda bundles', () => {
  it('serverless package builds bundles that run: relay publishes, consumer handles', async () => {
    execFileSync(
      'npx',
      ['serverless', 'package', '--stage', 'dev', '--package', path.join(work, 'package')],
      {
        cwd: root,
        env: { ...process.env, NPM_CONFIG_UPDATE_NOTIFIER: 'false' },
        stdio: 'ignore',
      },
    );
    for (const fn of ['relay', 'consumer']) {
      // Python's zipfile: python3 is already required for the emulator; unzip may be absent.
      execFileSync('python3', [
        '-m',
        'zipfile',
        '-e',
        path.join(work, 'package', `${fn}.zip`),
        path.join(work, fn),
      ]);
    }

    const { sqs } = awsClients();
    const queue = await createQueue(sqs, uniqueName('bundle'));
    const { eventId } = await createOrder(db.pool, { customerId: 'c-1', totalCents: 1200, currency: 'SEK' });

    const summary = invoke(
      'relay',
      { source: 'aws.events', 'detail-type': 'Scheduled Event' },
      {
        OUTBOX_ROUTES: JSON.stringify([
          { match: 'order.*', targets: [{ type: 'sqs', queueUrl: queue.url }] },
        ]),
        OUTBOX_SAFETY_MARGIN_MS: '1000',
      },
      2500,
    );
    expect(summary).toMatchObject({ published: 1, deadLettered: 0 });

    const messages = await drainQueue(sqs, queue.url, 1);
    expect(JSON.parse(messages[0]?.Body as string).id).toBe(eventId);
    const response = invoke('consumer', toSqsEvent(messages, queue.arn), { CONSUMER_NAME: 'bundle-check' });
    expect(response).toEqual({ batchItemFailures: [] });
    const { rows } = await db.pool.query('SELECT event_id FROM order_notifications');
    expect(rows).toEqual([{ event_id: eventId }]);
  }, 180_000);
});
