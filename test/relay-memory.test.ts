// The relay's memory is bounded by its claim's byte budget, whatever the
// payload sizes. The relay function, bundled as serverless.yml bundles it,
// runs on Node 22 with the heap the Lambda runtime gives a 512 MB function
// and drains 30 events of 10 MiB each to a queue and a bus (both through the
// claim check, S3); its peak resident memory must stay under 512 MB.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CreateEventBusCommand } from '@aws-sdk/client-eventbridge';
import { CreateBucketCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { enqueueEvents } from '../lib/outbox/enqueue.js';
import { LARGE_PAYLOAD_MAX_BYTES } from '../lib/outbox/limits.js';
import { ensureNode22, node22PathDir } from '../scripts/local/node22.js';
import { awsClients, createQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-memory-'));
const db = useTestDatabase();
const aws = awsClients();
const MEMORY_MB = 512; // serverless.yml, functions.relay.memorySize
const EVENTS = 30;

let node22 = '';
let bundle = '';
beforeAll(async () => {
  node22 = ensureNode22((line) => console.log(line));
  bundle = path.join(work, 'relay.mjs');
  // serverless.yml's custom.esbuild settings.
  await build({
    entryPoints: [path.join(root, 'functions/relay.ts')],
    outfile: bundle,
    bundle: true,
    minify: false,
    sourcemap: true,
    target: 'node22',
    platform: 'node',
    format: 'esm',
    mainFields: ['module', 'main'],
    conditions: ['outbox-source', 'module'],
    banner: {
      js: "import { createRequire as __outboxCreateRequire } from 'node:module'; const require = __outboxCreateRequire(import.meta.url);",
    },
    logLevel: 'error',
  });
}, 300_000);
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

/** A JSON payload of just under 10 MiB that does not compress (as a real document or image data would not). */
function tenMiBPayload(i: number) {
  const blob = randomBytes(Math.floor(((LARGE_PAYLOAD_MAX_BYTES - 1024) * 3) / 4)).toString('base64');
  return { n: i, blob };
}

describe('the relay function at its deployed memory', () => {
  it(`drains ${EVENTS} payloads of 10 MiB to a queue and a bus through S3, peak RSS under ${MEMORY_MB} MB`, async () => {
    const bucket = uniqueName('memory-payloads');
    await aws.s3.send(new CreateBucketCommand({ Bucket: bucket }));
    const queue = await createQueue(aws.sqs, uniqueName('memory'));
    const bus = uniqueName('memory-bus');
    await aws.eventBridge.send(new CreateEventBusCommand({ Name: bus }));
    for (let i = 0; i < EVENTS; i += 5) {
      await enqueueEvents(
        db.pool,
        Array.from({ length: 5 }, (_, k) => ({
          aggregateType: 'document',
          aggregateId: `d-${i + k}`,
          eventType: 'document.stored',
          payload: tenMiBPayload(i + k),
        })),
        { largePayloads: true },
      );
    }

    const eventFile = path.join(work, 'event.json');
    fs.writeFileSync(eventFile, JSON.stringify({ source: 'aws.events', 'detail-type': 'Scheduled Event' }));
    const output = execFileSync(
      node22,
      [
        // The heap the Lambda Node.js runtime gives a function of this memory size.
        `--max-semi-space-size=${Math.floor(MEMORY_MB / 10 / 2)}`,
        `--max-old-space-size=${MEMORY_MB - Math.floor(MEMORY_MB / 10)}`,
        path.join(root, 'test/support/invoke-bundle.mjs'),
        bundle,
        eventFile,
        '40000',
      ],
      {
        cwd: work,
        env: {
          PATH: [node22PathDir(), process.env.PATH ?? ''].join(path.delimiter),
          AWS_ENDPOINT_URL: inject('awsEndpoint'),
          AWS_REGION: 'us-east-1',
          AWS_ACCESS_KEY_ID: 'test',
          AWS_SECRET_ACCESS_KEY: 'test',
          AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
          AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(MEMORY_MB),
          MALLOC_ARENA_MAX: '2',
          DATABASE_URL: db.url,
          POWERTOOLS_LOG_LEVEL: 'ERROR',
          POWERTOOLS_METRICS_DISABLED: 'true',
          // serverless.yml's relay settings.
          OUTBOX_BATCH_SIZE: '100',
          OUTBOX_CONCURRENCY: '16',
          OUTBOX_SAFETY_MARGIN_MS: '10000',
          OUTBOX_LARGE_PAYLOAD_BUCKET: bucket,
          OUTBOX_ROUTES: JSON.stringify([
            {
              match: 'document.*',
              targets: [
                { type: 'sqs', queueUrl: queue.url },
                { type: 'eventbridge', busName: bus },
              ],
            },
          ]),
        },
        encoding: 'utf8',
        maxBuffer: 16 * 1024 * 1024,
      },
    );
    const { result, maxRssMb, node } = JSON.parse(output.trim().split('\n').pop() as string);
    console.log(`relay at ${MEMORY_MB} MB on ${node}: peak RSS ${Math.round(maxRssMb)} MB`, result);

    expect(result).toMatchObject({ published: EVENTS, deadLettered: 0 });
    const { rows } = await db.pool.query(
      'SELECT count(*) FILTER (WHERE processed_at IS NOT NULL)::int AS published FROM outbox_events',
    );
    expect(rows[0].published).toBe(EVENTS);
    const stored = await aws.s3.send(new ListObjectsV2Command({ Bucket: bucket }));
    expect(stored.KeyCount).toBe(EVENTS); // one object per event, shared by both targets
    expect(maxRssMb).toBeLessThan(MEMORY_MB);
  }, 300_000);
});
