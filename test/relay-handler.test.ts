import { afterAll, describe, expect, inject, it } from 'vitest';
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

describe('functions/relay handler', () => {
  it('drains on a schedule tick, then stops claiming near the end of its time budget', async () => {
    const { sqs } = awsClients();
    const queue = await createQueue(sqs, uniqueName('handler'));
    await insertEvents(db.pool, 3000);
    const { relayHandler } = await coldStart({
      OUTBOX_ROUTES: JSON.stringify([{ match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] }]),
      OUTBOX_BATCH_SIZE: '10',
      OUTBOX_WORKERS: '1',
      OUTBOX_SAFETY_MARGIN_MS: '2000',
    });
    const budgetMs = 2600;
    const started = Date.now();
    const summary = await relayHandler({}, lambdaContext(budgetMs) as never);
    const elapsed = Date.now() - started;

    expect(summary.stoppedBecause).toBe('time');
    // It stopped at the margin (600 ms of work) plus at most one batch in hand,
    // well before the invocation would have been killed.
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
