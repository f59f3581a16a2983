import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { useTestDatabase } from './support/database.js';
import { insertEvents, lambdaContext } from './support/events.js';
import { capturePowertoolsOutput, coldStartEnv, restoreEnv } from './support/lambda.js';

const db = useTestDatabase();

afterAll(async () => {
  restoreEnv();
});
afterEach(() => {
  vi.restoreAllMocks();
});

/** Imports the handler module fresh, as a Lambda cold start would. */
async function coldStart() {
  coldStartEnv({
    DATABASE_URL: db.url,
    DATABASE_SECRET_ARN: undefined,
    POWERTOOLS_LOG_LEVEL: 'INFO',
    POWERTOOLS_METRICS_DISABLED: 'true',
    POWERTOOLS_SERVICE_NAME: 'outbox-redrive',
  });
  return import('../functions/redrive.js');
}

describe('functions/redrive handler', () => {
  it('validates, logs who asked, redrives, returns the result; a bad request fails and changes nothing', async () => {
    const ids = await insertEvents(db.pool, 4, (i) => ({
      eventType: i < 3 ? 'order.created' : 'order.paid',
    }));
    await db.pool.query(
      `UPDATE outbox_events SET attempts = 3, dead_lettered_at = now(), last_error = 'no route'`,
    );
    const { handler } = await coldStart();
    const context = {
      ...lambdaContext(60_000, 'outbox-redrive'),
      identity: { cognitoIdentityId: 'us-east-1:alice', cognitoIdentityPoolId: 'us-east-1:pool' },
      clientContext: { client: {}, custom: { ticket: 'OPS-42' }, env: {} },
    };
    const logs = capturePowertoolsOutput();

    const preview = await handler(
      { eventType: 'order.created', dryRun: true, requestedBy: 'alice@example.com' },
      context as never,
    );
    expect(preview).toEqual({
      action: 'redrive',
      dryRun: true,
      matched: 3,
      reset: 0,
      discarded: 0,
      ids: ids.slice(0, 3),
    });

    const done = await handler(
      { eventType: 'order.created', requestedBy: 'alice@example.com' },
      context as never,
    );
    expect(done).toEqual({
      action: 'redrive',
      dryRun: false,
      matched: 3,
      reset: 3,
      discarded: 0,
      ids: ids.slice(0, 3),
    });

    const refused = await handler({ eventType: 'order.paid', limit: 50_000 }, context as never).catch(
      (error: unknown) => error,
    );
    expect(refused).toMatchObject({
      name: 'ValidationError',
      field: 'limit',
      message: 'limit: must be at most 10000',
    });
    const { rows } = await db.pool.query(
      'SELECT event_type, dead_lettered_at IS NOT NULL AS dead, redrive_count FROM outbox_events ORDER BY seq',
    );
    expect(rows.map((r) => [r.event_type, r.dead, r.redrive_count])).toEqual([
      ['order.created', false, 1],
      ['order.created', false, 1],
      ['order.created', false, 1],
      ['order.paid', true, 0],
    ]);

    vi.restoreAllMocks();
    const requested = logs.find((l) => l.message === 'redrive requested');
    expect(requested).toMatchObject({
      level: 'INFO',
      service: 'outbox-redrive',
      requested_by: 'alice@example.com',
      invoked_function_arn: context.invokedFunctionArn,
      cognito_identity: context.identity,
      client_context: context.clientContext,
      request: { eventType: 'order.created', dryRun: true, all: false, limit: 100 },
    });
    expect(logs.find((l) => l.message === 'dead letters redriven')).toMatchObject({
      requested_by: 'alice@example.com',
      dry_run: false,
      matched: 3,
      reset: 3,
      ids: ids.slice(0, 3),
      ids_truncated: false,
    });
    expect(logs.find((l) => l.message === 'redrive refused: invalid request')).toMatchObject({
      level: 'WARN',
      field: 'limit',
      requested_by: '(not given)',
    });
  });
});
