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
      busy: 0,
      ids: ids.slice(0, 3),
      relay: 'not-needed',
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
      busy: 0,
      ids: ids.slice(0, 3),
      relay: 'not-configured', // no OUTBOX_RELAY_FUNCTION here; the deployed stack sets it
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

  it('action "replay": validated, audited with the caller identity it logs, returns the replay', async () => {
    await db.pool.query('TRUNCATE outbox_events, outbox_replays');
    const ids = await insertEvents(db.pool, 3, (i) => ({
      eventType: i < 2 ? 'order.created' : 'order.paid',
    }));
    await db.pool.query('UPDATE outbox_events SET attempts = 1, processed_at = now()');
    const { handler } = await coldStart();
    const context = {
      ...lambdaContext(60_000, 'outbox-redrive'),
      clientContext: { client: {}, custom: { ticket: 'OPS-43' }, env: {} },
    };
    const logs = capturePowertoolsOutput();

    const preview = await handler(
      { action: 'replay', eventType: 'order.created', dryRun: true, requestedBy: 'bob' },
      context as never,
    );
    expect(preview).toEqual({
      action: 'replay',
      dryRun: true,
      replayId: null,
      matched: 2,
      replayed: 0,
      busy: 0,
      ids: ids.slice(0, 2),
      relay: 'not-needed',
    });
    const done = await handler(
      { action: 'replay', eventType: 'order.created', requestedBy: 'bob' },
      context as never,
    );
    expect(done).toMatchObject({
      action: 'replay',
      dryRun: false,
      matched: 2,
      replayed: 2,
      ids: ids.slice(0, 2),
    });
    const replayId = (done as { replayId: string }).replayId;

    const { rows: audit } = await db.pool.query('SELECT * FROM outbox_replays');
    expect(audit).toEqual([
      {
        id: replayId,
        requested_at: expect.any(Date),
        requested_by: 'bob',
        caller: {
          invoked_function_arn: context.invokedFunctionArn,
          aws_request_id: context.awsRequestId,
          cognito_identity: null,
          client_context: context.clientContext,
        },
        filter: { eventType: 'order.created', limit: 100, all: false },
        matched: 2,
        replayed: 2,
        event_ids: ids.slice(0, 2),
      },
    ]);

    // Validated as a replay: its own fields, the redrive's limits; nothing changes.
    for (const [payload, field] of [
      [{ action: 'replay', deadLetteredAfter: '2025-01-01T00:00:00Z' }, 'deadLetteredAfter'],
      [{ action: 'replay', eventType: 'order.paid', limit: 50_000 }, 'limit'],
      [{ action: 'replay' }, 'all'],
      [{ action: 'replay', ids: ['not-a-uuid'] }, 'ids[0]'],
    ] as const) {
      const refused = await handler(payload, context as never).catch((error: unknown) => error);
      expect(refused, JSON.stringify(payload)).toMatchObject({ name: 'ValidationError', field });
    }
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM outbox_replays');
    expect(rows[0].n).toBe(1);
    const { rows: paid } = await db.pool.query(
      `SELECT processed_at IS NOT NULL AS published, replay_id FROM outbox_events WHERE event_type = 'order.paid'`,
    );
    expect(paid).toEqual([{ published: true, replay_id: null }]);

    vi.restoreAllMocks();
    expect(logs.find((l) => l.message === 'replay requested')).toMatchObject({
      requested_by: 'bob',
      invoked_function_arn: context.invokedFunctionArn,
      client_context: context.clientContext,
      request: { action: 'replay', eventType: 'order.created', dryRun: true, limit: 100 },
    });
    expect(logs.find((l) => l.message === 'events replayed')).toMatchObject({
      replay_id: replayId,
      matched: 2,
      replayed: 2,
      ids: ids.slice(0, 2),
    });
    expect(logs.find((l) => l.message === 'replay refused: invalid request')).toMatchObject({
      level: 'WARN',
      field: 'deadLetteredAfter',
    });
  });
});
