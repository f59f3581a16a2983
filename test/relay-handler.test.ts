import {
  CreateSecretCommand,
  DeleteSecretCommand,
  SecretsManagerClient,
} from '@aws-sdk/client-secrets-manager';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { SCALE_OUT_SOURCE, WAKE_SOURCE } from '../lib/relay/invocation.js';
import { TargetProxy } from '../scripts/chaos/target-proxy.js';
import { awsClients, createQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { eventRows, insertEvents, lambdaContext } from './support/events.js';
import { coldStartEnv, restoreEnv } from './support/lambda.js';

const db = useTestDatabase();

afterAll(async () => {
  restoreEnv();
});

/** Imports the handler module fresh, as a Lambda cold start would, with `env`. */
async function coldStart(env: Record<string, string>) {
  coldStartEnv({
    AWS_ENDPOINT_URL: inject('awsEndpoint'),
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
    DATABASE_URL: db.url,
    POWERTOOLS_LOG_LEVEL: 'ERROR',
    POWERTOOLS_METRICS_DISABLED: 'true',
    ...env,
  });
  return import('../functions/relay.js');
}

/** The database sessions a cold-started relay holds: its connections' application_name is its function name. */
async function relaySessions(functionName: string): Promise<number> {
  const { rows } = await db.pool.query(
    'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1',
    [functionName],
  );
  return rows[0].n;
}

describe('functions/relay handler', () => {
  it('drains on a schedule tick, then stops claiming near the end of its time budget', async () => {
    const { sqs } = awsClients();
    const queue = await createQueue(sqs, uniqueName('handler'));
    await insertEvents(db.pool, 3000);
    const { relayHandler } = await coldStart({
      OUTBOX_ROUTES: JSON.stringify([{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }]),
      OUTBOX_BATCH_SIZE: '10',
      OUTBOX_WORKERS: '1',
      OUTBOX_SAFETY_MARGIN_MS: '4000',
    });
    const budgetMs = 4600;
    const started = Date.now();
    const summary = await relayHandler({}, lambdaContext(budgetMs) as never);
    const elapsed = Date.now() - started;

    expect(summary.stoppedBecause).toBe('time');
    // It stopped claiming at the margin (600 ms of work); a batch in hand is
    // cut at the reserve (2 s before the end), and recording what it held
    // leaves the last second free: well before the invocation would have
    // been killed.
    expect(elapsed).toBeLessThan(budgetMs - 1000);
    expect(summary.published).toBeGreaterThan(0);
    expect(summary.published).toBeLessThan(3000);
    const rows = await eventRows(db.pool);
    // It finished what it held: nothing is left under a lease, and the rows it
    // marked are exactly those it reported.
    expect(rows.filter((r) => r.locked_by !== null)).toEqual([]);
    expect(rows.filter((r) => r.processed_at !== null)).toHaveLength(summary.published);
    expect(summary.stats).toMatchObject({ pending: 3000 - summary.published, deadLetters: 0 });
    expect((await receiveAll(sqs, queue.url, 1)).length).toBeGreaterThan(0);
  });

  it('against an endpoint that accepts connections and never answers, returns before its timeout with nothing leased', async () => {
    const { sqs } = awsClients();
    const queue = await createQueue(sqs, uniqueName('handler-hung'));
    await db.pool.query('TRUNCATE outbox_events');
    await insertEvents(db.pool, 100);
    const proxy = await TargetProxy.start(inject('awsEndpoint'));
    proxy.setMode('blackhole');
    try {
      // The deployed settings (batch 100, 2 workers, 4 calls in flight, lease
      // 120 s), with a shorter budget: 6 s and a 4 s margin.
      // The SQS client sends to the queue URL's host, so the URL names the proxy.
      const queueUrl = new URL(queue.url);
      queueUrl.host = new URL(proxy.endpoint).host;
      const { relayHandler } = await coldStart({
        AWS_ENDPOINT_URL: proxy.endpoint,
        OUTBOX_ROUTES: JSON.stringify([{ match: '*', targets: [{ type: 'sqs', queueUrl: queueUrl.href }] }]),
        OUTBOX_BATCH_SIZE: '100',
        OUTBOX_CONCURRENCY: '4',
        OUTBOX_LEASE_MS: '120000',
        OUTBOX_SAFETY_MARGIN_MS: '4000',
        OUTBOX_MAX_ATTEMPTS: '3',
      });
      const budgetMs = 6_000;
      const started = Date.now();
      const summary = await relayHandler({}, lambdaContext(budgetMs) as never);
      expect(Date.now() - started).toBeLessThan(budgetMs);
      expect(summary).toMatchObject({ claimed: 100, published: 0, held: 100, deadLettered: 0 });
      const rows = await eventRows(db.pool);
      expect(rows.filter((r) => r.locked_by !== null)).toEqual([]);
      expect(rows.every((r) => r.attempts === 0 && r.dead_lettered_at === null)).toBe(true);
      expect(proxy.counts.blackholed).toBeGreaterThan(0);
    } finally {
      await proxy.stop();
    }
  });

  it('elastic (an idle tail): an empty schedule tick returns at once; a wake, or a relay started for a backlog, keeps its tail', async () => {
    const { sqs } = awsClients();
    const queue = await createQueue(sqs, uniqueName('handler-elastic'));
    await db.pool.query('TRUNCATE outbox_events');
    const { relayHandler } = await coldStart({
      OUTBOX_ROUTES: JSON.stringify([{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }]),
      OUTBOX_IDLE_TAIL_MS: '1500',
      OUTBOX_SAFETY_MARGIN_MS: '2000',
    });
    const scheduled = { source: 'aws.events', 'detail-type': 'Scheduled Event', detail: {} };
    let started = Date.now();
    const tick = await relayHandler(scheduled, lambdaContext(30_000) as never);
    expect(tick).toMatchObject({ stoppedBecause: 'idle', claimed: 0 });
    expect(Date.now() - started).toBeLessThan(1_000);

    started = Date.now();
    const woken = await relayHandler({ source: WAKE_SOURCE }, lambdaContext(30_000) as never);
    expect(woken).toMatchObject({ stoppedBecause: 'idle', claimed: 0 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_500);
    expect(Date.now() - started).toBeLessThan(5_000);

    // Started for a backlog: its first claim may find the heads another
    // relay holds for a moment (ordered mode); it does not leave on that.
    started = Date.now();
    const scaledOut = await relayHandler({ source: SCALE_OUT_SOURCE }, lambdaContext(30_000) as never);
    expect(scaledOut).toMatchObject({ stoppedBecause: 'idle', claimed: 0 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_500);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('a running relay holds at most OUTBOX_WORKERS + 1 database sessions, + 1 with OUTBOX_LISTEN (the connection budget counts these)', async () => {
    await db.pool.query('TRUNCATE outbox_events, outbox_relay_slots');
    const events = 400;
    await insertEvents(db.pool, events);
    const { sqs } = awsClients();
    const queue = await createQueue(sqs, uniqueName('handler-sessions'));
    const functionName = uniqueName('relay-sessions');
    const { relayHandler } = await coldStart({
      AWS_LAMBDA_FUNCTION_NAME: functionName, // the connections' application_name
      OUTBOX_ROUTES: JSON.stringify([{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }]),
      OUTBOX_WORKERS: '2',
      OUTBOX_BATCH_SIZE: '20',
      OUTBOX_LISTEN: 'true',
      OUTBOX_MAX_RELAYS: '2',
      OUTBOX_DB_CONNECTION_BUDGET: '8',
      OUTBOX_IDLE_TAIL_MS: '500',
    });
    let most = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        most = Math.max(most, await relaySessions(functionName));
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const summary = await relayHandler({ source: WAKE_SOURCE }, lambdaContext(60_000) as never);
    sampling = false;
    await sampler;
    expect(summary).toMatchObject({ published: events });
    // Two workers' claims, the slot's renewals and the listener: 2 + 1 + 1.
    console.info(`relay sessions at most: ${most}`);
    expect(most).toBeGreaterThanOrEqual(3);
    expect(most).toBeLessThanOrEqual(4);
  }, 60_000);

  it('with slots free, a wake or a tick defers to a relay that runs; a relay started for a backlog does not', async () => {
    await db.pool.query('TRUNCATE outbox_events, outbox_relay_slots');
    await insertEvents(db.pool, 5);
    // A relay runs (alive, slot 0); slots 1 and 2 are free.
    await db.pool.query(
      "INSERT INTO outbox_relay_slots VALUES (0, gen_random_uuid(), now() + interval '10 minutes', now() + interval '10 minutes')",
    );
    const { sqs } = awsClients();
    const queue = await createQueue(sqs, uniqueName('handler-defer'));
    const { relayHandler } = await coldStart({
      AWS_LAMBDA_FUNCTION_NAME: uniqueName('relay-defer'),
      OUTBOX_ROUTES: JSON.stringify([{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }]),
      OUTBOX_MAX_RELAYS: '3',
      OUTBOX_IDLE_TAIL_MS: '500',
    });
    for (const event of [{ source: WAKE_SOURCE }, { source: 'aws.events' }]) {
      expect(await relayHandler(event, lambdaContext(30_000) as never)).toMatchObject({
        stoppedBecause: 'busy',
        claimed: 0,
      });
    }
    const started = await relayHandler({ source: SCALE_OUT_SOURCE }, lambdaContext(30_000) as never);
    expect(started).toMatchObject({ published: 5, slot: 1 });
    // Drained, it leaves (the trickle to the relay holding its slot longer: `surplus`).
    expect(['idle', 'surplus']).toContain(started.stoppedBecause);
  });

  it('a run that finds every relay slot held claims nothing and keeps no database connection; the next connects without reading the secret again', async () => {
    await db.pool.query('TRUNCATE outbox_events, outbox_relay_slots');
    await insertEvents(db.pool, 5);
    await db.pool.query(
      "INSERT INTO outbox_relay_slots VALUES (0, gen_random_uuid(), now() + interval '10 minutes')",
    );
    const { sqs } = awsClients();
    const queue = await createQueue(sqs, uniqueName('handler-busy'));
    const functionName = uniqueName('relay-busy');
    // The database settings come from a secret, read at the first run only.
    const url = new URL(db.url);
    const secrets = new SecretsManagerClient({
      endpoint: inject('awsEndpoint'),
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const secret = await secrets.send(
      new CreateSecretCommand({
        Name: uniqueName('relay-busy-db'),
        SecretString: JSON.stringify({
          host: url.hostname,
          port: Number(url.port),
          username: decodeURIComponent(url.username),
          password: '',
          dbname: url.pathname.slice(1),
          sslmode: 'disable',
        }),
      }),
    );
    const { relayHandler } = await coldStart({
      DATABASE_URL: '',
      DATABASE_SECRET_ARN: secret.ARN as string,
      AWS_LAMBDA_FUNCTION_NAME: functionName, // the connections' application_name
      OUTBOX_ROUTES: JSON.stringify([{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }]),
      OUTBOX_MAX_RELAYS: '1',
      OUTBOX_IDLE_TAIL_MS: '500',
    });
    const sessions = () => relaySessions(functionName);
    for (let run = 0; run < 2; run++) {
      const summary = await relayHandler({ source: WAKE_SOURCE }, lambdaContext(30_000) as never);
      expect(summary).toMatchObject({ stoppedBecause: 'busy', claimed: 0 });
      // A busy container may stay warm for minutes: it holds no session
      // meanwhile. (The server drops a closed session from its view a moment later.)
      const deadline = Date.now() + 3_000;
      while ((await sessions()) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(await sessions()).toBe(0);
      // Gone after the first run: the runs after it use the settings they read.
      if (run === 0) {
        await secrets.send(
          new DeleteSecretCommand({ SecretId: secret.ARN as string, ForceDeleteWithoutRecovery: true }),
        );
      }
    }
    // Once the slot is free, the same warm handler connects again and drains.
    await db.pool.query('TRUNCATE outbox_relay_slots');
    const drained = await relayHandler({ source: WAKE_SOURCE }, lambdaContext(30_000) as never);
    expect(drained).toMatchObject({ stoppedBecause: 'idle', published: 5 });
  });

  it('a bad variable fails the cold start with its name', async () => {
    await expect(coldStart({ OUTBOX_ROUTES: '[{"match":"*","targets":[]}]' })).rejects.toMatchObject({
      name: 'ConfigError',
      variable: 'OUTBOX_ROUTES',
    });
    await expect(
      coldStart({
        OUTBOX_ROUTES: '[{"match":"*","targets":[{"type":"sqs","queueUrl":"http://q"}]}]',
        OUTBOX_BATCH_SIZE: 'lots',
      }),
    ).rejects.toThrow(/^OUTBOX_BATCH_SIZE: expected an integer from 1 to 5000 \(got "lots"\)$/);
  });
});
