import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import pg from 'pg';
import { createRelayWaker, type RelayWaker, ValidationError, type WakeOutcome } from 'pg-lambda-outbox';
import { databaseConfig, schemaVar } from 'pg-lambda-outbox/lambda';
import {
  parseRedriveInput,
  parseReplayInput,
  type RedriveResult,
  type ReplayResult,
  redrive,
  replay,
} from 'pg-lambda-outbox/operations';
import { observability } from './shared/observability.js';

const { logger, metrics } = observability('outbox-redrive');
// Cold start: the schema of the outbox tables (OUTBOX_SCHEMA; a bad name fails the init).
const schema = schemaVar(process.env);

/** Ids logged with the audit line; more would not fit one CloudWatch event (256 KB). */
const MAX_LOGGED_IDS = 1000;

let pool: Promise<pg.Pool> | undefined;

/**
 * Redriven and replayed events are pending again: the relay is woken at
 * once (OUTBOX_RELAY_FUNCTION, the reference stack's relay) instead of
 * leaving them to the next schedule tick, which an elastic relay may be a
 * minute away from. Skipped while a relay holds a slot: that one takes them.
 */
let waker: RelayWaker | undefined;

async function wakeRelay(changed: number): Promise<WakeOutcome | 'not-needed' | 'not-configured'> {
  const functionName = process.env.OUTBOX_RELAY_FUNCTION;
  if (changed === 0) return 'not-needed';
  if (!functionName) return 'not-configured';
  // An operator's call, not a commit: it may wait for the Invoke to be accepted
  // (so the response says `invoked`, and nothing is left in flight when the function freezes).
  waker ??= createRelayWaker({ functionName, db: await getPool(), schema, logger, waitMs: 2_000 });
  return waker.wake();
}

async function buildPool(): Promise<pg.Pool> {
  const created = new pg.Pool({ ...(await databaseConfig()), max: 1 });
  created.on('error', (error) => logger.warn('idle database connection failed', { error: String(error) }));
  return created;
}

/** The action the raw payload asked for, for log lines about a refused request. */
function actionOf(event: unknown): string {
  const action = event && typeof event === 'object' && 'action' in event ? event.action : undefined;
  return action === 'discard' || action === 'replay' ? action : 'redrive';
}

/**
 * Who asked, as far as Lambda can tell. A direct `lambda:Invoke` carries no
 * IAM principal in the context (CloudTrail records it), so the payload's
 * `requestedBy` is the operator's own statement; Cognito identity and client
 * context are present when the caller sent them (mobile SDKs,
 * `aws lambda invoke --client-context`).
 */
function caller(event: unknown, context: Context) {
  // Read from the raw payload, so a refused request is attributed too (capped: it is not validated yet).
  const requestedBy =
    event && typeof event === 'object' && 'requestedBy' in event
      ? String(event.requestedBy).slice(0, 256)
      : undefined;
  return {
    requested_by: requestedBy ?? '(not given)',
    invoked_function_arn: context.invokedFunctionArn,
    cognito_identity: context.identity ?? null,
    client_context: context.clientContext ?? null,
  };
}

async function getPool(): Promise<pg.Pool> {
  pool ??= buildPool().catch((error) => {
    pool = undefined; // retry the setup on the next invocation
    throw error;
  });
  return pool;
}

/** Validates, logging and counting a refusal; rethrows the `ValidationError`. */
function validated<T>(event: unknown, who: ReturnType<typeof caller>, parse: (event: unknown) => T): T {
  try {
    return parse(event);
  } catch (error) {
    if (error instanceof ValidationError) {
      // The caller's mistake, not the function's: warn, and fail the invocation
      // so `serverless invoke` / `aws lambda invoke` show the reason.
      logger.warn(`${actionOf(event)} refused: invalid request`, {
        ...who,
        field: error.field,
        error: error.message,
      });
      metrics.addMetric('RedriveRefused', MetricUnit.Count, 1);
    }
    throw error;
  }
}

/**
 * `"action": "replay"`: republish already published events. The same
 * function as redrive and discard because it is the same kind of operator
 * act on the same rows: the same invoke permission, database access and
 * audit logging; it publishes nothing itself (the relay does). The caller
 * identity logged here is also stored in the replay's audit row.
 */
async function replayHandler(event: unknown, context: Context): Promise<ReplayResult & WokenRelay> {
  const who = caller(event, context);
  const request = validated(event, who, parseReplayInput);
  const { requestedBy: _, ...filter } = request;
  logger.info('replay requested', { ...who, request: filter });
  const result = await replay(await getPool(), request, {
    caller: {
      invoked_function_arn: who.invoked_function_arn,
      aws_request_id: context.awsRequestId,
      cognito_identity: who.cognito_identity,
      client_context: who.client_context,
    },
    schema,
  });
  metrics.addMetric('Replayed', MetricUnit.Count, result.replayed);
  const relay = await wakeRelay(result.dryRun ? 0 : result.replayed);
  logger.info(result.dryRun ? 'replay dry run' : 'events replayed', {
    ...who,
    action: result.action,
    dry_run: result.dryRun,
    replay_id: result.replayId,
    matched: result.matched,
    replayed: result.replayed,
    busy: result.busy,
    relay,
    ids: result.ids.slice(0, MAX_LOGGED_IDS),
    ids_truncated: result.ids.length > MAX_LOGGED_IDS,
  });
  return { ...result, relay };
}

/**
 * What became of the relay after a request that made events pending again:
 * `invoked` (woken), `relay-running` (a relay holds a slot and takes them),
 * `failed` (the wake failed, logged; the schedule publishes them),
 * `not-needed` (a dry run, a discard, nothing changed), `not-configured`
 * (no OUTBOX_RELAY_FUNCTION).
 */
interface WokenRelay {
  relay: WakeOutcome | 'not-needed' | 'not-configured';
}

/**
 * Operator-invoked: the payload is the redrive request, e.g.
 * `{"eventType":"order.created","dryRun":true}`, or with `"action":"discard"`
 * to finish dead letters without publishing them, or with `"action":"replay"`
 * to republish published events (see `replayHandler`). Returns `{ action, dryRun,
 * matched, reset, discarded, ids }` (a replay: `{ action, dryRun, replayId,
 * matched, replayed, busy, ids }`). A bad request fails the invocation with the
 * `ValidationError` (errorType `ValidationError`, errorMessage naming the
 * field) and changes nothing. Both results also say what became of the
 * relay (`relay`: see {@link WokenRelay}).
 */
export async function redriveHandler(
  event: unknown,
  context: Context,
): Promise<(RedriveResult | ReplayResult) & WokenRelay> {
  if (actionOf(event) === 'replay') return replayHandler(event, context);
  const who = caller(event, context);
  const request = validated(event, who, parseRedriveInput);
  const { requestedBy: _, ...filter } = request;
  logger.info(`${request.action} requested`, { ...who, request: filter });

  const result = await redrive(await getPool(), request, { schema });

  if (result.action === 'discard') metrics.addMetric('Discarded', MetricUnit.Count, result.discarded);
  else metrics.addMetric('Redriven', MetricUnit.Count, result.reset);
  const relay = await wakeRelay(result.dryRun ? 0 : result.reset);
  const done = result.action === 'discard' ? 'dead letters discarded' : 'dead letters redriven';
  logger.info(result.dryRun ? `${result.action} dry run` : done, {
    ...who,
    action: result.action,
    dry_run: result.dryRun,
    matched: result.matched,
    reset: result.reset,
    discarded: result.discarded,
    busy: result.busy,
    relay,
    ids: result.ids.slice(0, MAX_LOGGED_IDS),
    ids_truncated: result.ids.length > MAX_LOGGED_IDS,
  });
  return { ...result, relay };
}

export const handler = middy(redriveHandler).use(injectLambdaContext(logger)).use(logMetrics(metrics));
