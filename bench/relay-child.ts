import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { CreateEventBusCommand, EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { CreateQueueCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { BuildOptions } from 'esbuild';
import pg from 'pg';
import { migrate } from '../lib/db/migrate.js';
import { startLocalAws, useLocalAwsEnv } from '../scripts/local/aws-emulator.js';
import { ensureNode22 } from '../scripts/local/node22.js';
import { dropDatabase, ensureDatabase, startLocalPostgres } from '../scripts/local/postgres.js';
import { insertBacklog } from './backlog.js';

/**
 * bench/db-cost-child.ts bundled the way serverless-esbuild bundles the
 * Lambda (one ESM file, packages inside), for the benchmarks that run the
 * relay in a child process (bench/db-cost.ts, bench/cpu-ab.ts). `root` is
 * the tree whose child is bundled.
 */
export function relayChildBuild(root: string): BuildOptions {
  return {
    entryPoints: [path.join(root, 'bench/db-cost-child.ts')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    logLevel: 'error',
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
  };
}

/** The deployed relay's settings (serverless.yml: OUTBOX_BATCH_SIZE, OUTBOX_WORKERS, OUTBOX_CONCURRENCY). */
export const DEPLOYED_RELAY = { relay: { batchSize: 100, workers: 2, safetyMarginMs: 0 }, concurrency: 16 };

/**
 * A new queue and bus on the emulator the SDK's environment names, and the
 * relay child's environment to drain `databaseUrl` to both at the deployed
 * settings, with direct calls (each event to the queue and the bus, as the
 * reference stack routes it).
 */
export async function deployedRelayEnv(prefix: string, databaseUrl: string): Promise<Record<string, string>> {
  const { QueueUrl } = await new SQSClient({}).send(
    new CreateQueueCommand({ QueueName: `${prefix}-${randomUUID().slice(0, 8)}` }),
  );
  const busName = `${prefix}-${randomUUID().slice(0, 8)}`;
  await new EventBridgeClient({}).send(new CreateEventBusCommand({ Name: busName }));
  return {
    DATABASE_URL: databaseUrl,
    PUBLISHER: 'both',
    QUEUE_URL: QueueUrl as string,
    BUS_NAME: busName,
    DIRECT_CALLS: '1',
    RELAY: JSON.stringify(DEPLOYED_RELAY.relay),
    CONCURRENCY: String(DEPLOYED_RELAY.concurrency),
  };
}

/** An outbox holding exactly `count` pending events of the benchmarks' backlog, its statistics fresh. */
export async function freshBacklog(db: Pick<pg.Pool, 'query'>, count: number): Promise<void> {
  await db.query('TRUNCATE outbox_events');
  await insertBacklog(db, count);
  await db.query('VACUUM ANALYZE outbox_events');
}

/**
 * What a benchmark of the relay child needs: a database of its own
 * (migrated), Node 22, MiniStack with a queue and a bus, and the child's
 * environment (`deployedRelayEnv`). `stop` removes what it started.
 */
export async function startRelayBench(name: string, log: (line: string) => void) {
  const postgres = await startLocalPostgres({ log });
  const url = await ensureDatabase(postgres.adminUrl, name);
  await migrate({ databaseUrl: url });
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  const node22 = ensureNode22(log);
  const aws = await startLocalAws({ emulator: 'ministack', log });
  useLocalAwsEnv(aws.endpoint);
  const stop = async () => {
    await aws.stop();
    await pool.end();
    await dropDatabase(postgres.adminUrl, name).catch(() => {});
    await postgres.stop();
  };
  try {
    const childEnv = await deployedRelayEnv(name.replaceAll('_', '-'), url);
    return { pool, node22, aws, childEnv, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
