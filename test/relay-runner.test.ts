import { type ChildProcess, spawn } from 'node:child_process';
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../lib/errors.js';
import { NullPublisher } from '../lib/publish/null-publisher.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import { startRelayFromEnv } from '../lib/relay/container.js';
import { Relay } from '../lib/relay/relay.js';
import { runRelay } from '../lib/relay/runner.js';
import { awsClients, createQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger, eventRows, insertEvents } from './support/events.js';
import { emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();

const until = async (condition: () => Promise<boolean>, timeoutMs: number) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

async function queueDepth(queueUrl: string): Promise<number> {
  const { Attributes } = await aws.sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  return (
    Number(Attributes?.ApproximateNumberOfMessages) +
    Number(Attributes?.ApproximateNumberOfMessagesNotVisible)
  );
}

/** Rows of this test's events: none may be left leased; published ones are on the queue once. */
async function settledRows(ids: readonly string[]) {
  const wanted = new Set(ids);
  const rows = (await eventRows(db.pool)).filter((r) => wanted.has(r.id));
  return {
    leased: rows.filter((r) => r.locked_by !== null || r.locked_until !== null),
    published: rows.filter((r) => r.processed_at !== null),
    unpublished: rows.filter((r) => r.processed_at === null),
  };
}

describe('runRelay', () => {
  it('publishes a backlog to SQS and, aborted mid-batch, finishes that batch and leaves nothing leased', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('runner'));
    const routes: RouteConfig[] = [{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }];
    const ids = await insertEvents(db.pool, 600, (i) => ({ aggregateId: `runner-${i}` }));
    const controller = new AbortController();
    let calls = 0;
    const { relay, log } = emulatorRelay(
      db.pool,
      aws,
      routes,
      // The Lambda's default margin: the runner must not be stopped by it.
      { batchSize: 50, workers: 2, safetyMarginMs: 10_000 },
      {
        // Abort while the 25th SendMessageBatch call is in flight: the
        // batches of both workers are then half sent.
        onCall: () => {
          if (++calls === 25) controller.abort();
        },
      },
    );
    const summary = await runRelay({ relay, signal: controller.signal, logger: log.logger });

    expect(controller.signal.aborted).toBe(true);
    const rows = await settledRows(ids);
    expect(rows.leased).toEqual([]);
    // Whole batches went out: every call's messages were recorded as published.
    expect(rows.published.length).toBeGreaterThanOrEqual(250);
    expect(rows.published.length % 50).toBe(0);
    expect(rows.unpublished.length).toBe(600 - rows.published.length);
    expect(summary).toMatchObject({ runs: 1, failedRuns: 0, published: rows.published.length });
    const received = await receiveAll(aws.sqs, queue.url, rows.published.length, 60_000);
    const sentIds = received.map((m) => JSON.parse(m.Body as string).id as string);
    expect(new Set(sentIds)).toEqual(new Set(rows.published.map((r) => r.id)));
    expect(sentIds).toHaveLength(rows.published.length);
    const runLogs = log.lines.filter((l) => l.message === 'relay run finished');
    expect(runLogs).toHaveLength(1);
    expect(runLogs[0]?.extra).toMatchObject({ stoppedBecause: 'aborted', published: rows.published.length });

    // A second runner drains the rest, in runs of 1 s back to back.
    const second = new AbortController();
    const running = runRelay({ relay, signal: second.signal, runMs: 1_000, logger: log.logger });
    await until(async () => (await settledRows(ids)).unpublished.length === 0, 30_000);
    await new Promise((r) => setTimeout(r, 1_200)); // at least one run ends by its length
    second.abort();
    const rest = await running;
    expect(rest.published).toBe(600 - rows.published.length);
    expect(rest.runs).toBeGreaterThanOrEqual(2);
    const ends = log.lines
      .filter((l) => l.message === 'relay run finished')
      .slice(1)
      .map((l) => l.extra.stoppedBecause);
    expect(ends.at(-1)).toBe('aborted');
    expect(ends.slice(0, -1).every((e) => e === 'time')).toBe(true);
    expect((await settledRows(ids)).leased).toEqual([]);
    expect(await queueDepth(queue.url)).toBe(600);
  });

  it('stops within the idle wait when aborted while the outbox is empty', async () => {
    const relay = new Relay({
      db: db.pool,
      publisher: new NullPublisher(),
      options: { workers: 2, idleWaitMs: 200 },
    });
    const controller = new AbortController();
    const running = runRelay({ relay, signal: controller.signal });
    await new Promise((r) => setTimeout(r, 300));
    const abortedAt = Date.now();
    controller.abort();
    await running;
    expect(Date.now() - abortedAt).toBeLessThan(1_000);
  });

  it('refuses a run length or retry delay that is not a positive whole number of ms', async () => {
    const relay = new Relay({ db: db.pool, publisher: new NullPublisher() });
    const signal = AbortSignal.abort();
    await expect(runRelay({ relay, signal, runMs: 10 })).rejects.toThrow(ConfigError);
    await expect(runRelay({ relay, signal, maxRetryDelayMs: 0.5 })).rejects.toThrow(/maxRetryDelayMs/);
  });
});

describe('a run whose remaining time is within the safety margin', () => {
  it('is refused with a ConfigError naming safetyMarginMs instead of claiming nothing', async () => {
    await insertEvents(db.pool, 1, () => ({ aggregateId: 'guard' }));
    const publisher = new NullPublisher();
    const relay = new Relay({ db: db.pool, publisher }); // default margin: 10 s
    const run = relay.run({ remainingMs: () => 5_000 });
    await expect(run).rejects.toThrow(ConfigError);
    await expect(relay.run({ remainingMs: () => 5_000 })).rejects.toMatchObject({
      variable: 'safetyMarginMs',
    });
    expect(publisher.published).toBe(0);
  });

  it('a deadline already passed is the end of a loop, not a mistake: the run returns at once', async () => {
    const relay = new Relay({ db: db.pool, publisher: new NullPublisher() });
    const summary = await relay.run({ remainingMs: () => 0, skipStats: true });
    expect(summary).toMatchObject({ claimed: 0, stoppedBecause: 'time' });
  });
});

describe('startRelayFromEnv', () => {
  it('fails with a ConfigError naming the variable before connecting', async () => {
    const signal = new AbortController().signal;
    await expect(
      startRelayFromEnv({ signal, env: { DATABASE_URL: db.url }, logger: captureLogger().logger }),
    ).rejects.toMatchObject({ name: 'ConfigError', variable: 'OUTBOX_ROUTES' });
  });

  it('in a child process: SIGTERM finishes the batch in flight and exits 0 within a bound', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('container'));
    const ids = await insertEvents(db.pool, 3_000, (i) => ({ aggregateId: `container-${i}` }));
    // Rows other tests of this file left pending go out too.
    const publishedBefore = (await eventRows(db.pool)).filter((r) => r.processed_at !== null).length;
    // The container entry as a user would write it, importing the package only.
    const entry = [
      "import { startRelayFromEnv } from 'pg-lambda-outbox/relay';",
      'const controller = new AbortController();',
      "for (const s of ['SIGTERM', 'SIGINT']) process.on(s, () => controller.abort());",
      'await startRelayFromEnv({ signal: controller.signal });',
    ].join('\n');
    // One process, as in a container where the entry is PID 1 and receives
    // the orchestrator's SIGTERM itself (npx would not pass the signal on).
    const args = ['--import', 'tsx', '--conditions=outbox-source', '--input-type=module', '-e', entry];
    const child: ChildProcess = spawn(process.execPath, args, {
      env: {
        ...process.env,
        DATABASE_URL: db.url,
        OUTBOX_ROUTES: JSON.stringify([{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }]),
        OUTBOX_BATCH_SIZE: '50',
        OUTBOX_WORKERS: '2',
        AWS_ENDPOINT_URL: aws.endpoint,
        AWS_REGION: 'us-east-1',
        AWS_ACCESS_KEY_ID: 'test',
        AWS_SECRET_ACCESS_KEY: 'test',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d) => {
      stdout += d;
    });
    child.stderr?.on('data', (d) => {
      stderr += d;
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      // Mid-drain: some published, most not.
      await until(async () => (await settledRows(ids)).published.length >= 200, 30_000).catch((error) => {
        throw new Error(`${error.message}; the relay wrote:\n${stdout}\n${stderr}`);
      });
      const termAt = Date.now();
      child.kill('SIGTERM');
      const code = await exited;
      const tookMs = Date.now() - termAt;
      expect(code, stderr).toBe(0);
      expect(tookMs).toBeLessThan(5_000);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
    const rows = await settledRows(ids);
    expect(rows.leased).toEqual([]);
    expect(rows.unpublished.length).toBeGreaterThan(0);
    // Every row it published has its message on the queue, and no more.
    const all = await eventRows(db.pool);
    expect(all.filter((r) => r.locked_by !== null)).toEqual([]);
    const publishedByChild = all.filter((r) => r.processed_at !== null).length - publishedBefore;
    expect(await queueDepth(queue.url)).toBe(publishedByChild);
    const lines = stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const last = lines.filter((l) => l.message === 'relay run finished').at(-1);
    expect(last).toMatchObject({ level: 'INFO', stoppedBecause: 'aborted', leaseLost: 0 });
    // Whatever was claimed went out and was recorded, the batches in flight at SIGTERM included.
    expect(last?.published).toBe(last?.claimed);
    expect(lines.at(-1)).toMatchObject({ message: 'relay runner stopped', published: publishedByChild });
  });
});
