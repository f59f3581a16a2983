import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import pg from 'pg';
import { databaseConfig } from 'pg-lambda-outbox/lambda';
import { type CleanupReport, loadCleanupConfig, runCleanup } from 'pg-lambda-outbox/operations';
import { observability } from './shared/observability.js';

// Cold start: validate config (a bad variable fails the init with its name).
const options = loadCleanupConfig();
const { logger, metrics, metricsSink } = observability('outbox-cleanup');

let pool: Promise<pg.Pool> | undefined;

async function buildPool(): Promise<pg.Pool> {
  const created = new pg.Pool({ ...(await databaseConfig()), max: 1 });
  created.on('error', (error) => logger.warn('idle database connection failed', { error: String(error) }));
  return created;
}

/**
 * Scheduled hourly: deletes rows past their retention in bounded batches and
 * stops before the invocation's time runs out. The report is logged and its
 * counts are emitted as metrics (OutboxEventsDeleted, ProcessedEventsDeleted,
 * DeadLettersDeleted, CleanupUnfinished).
 */
export async function cleanupHandler(_event: unknown, context: Context): Promise<CleanupReport> {
  pool ??= buildPool().catch((error) => {
    pool = undefined; // retry the setup on the next invocation
    throw error;
  });
  return runCleanup(
    { db: await pool, options, logger, metrics: metricsSink },
    { remainingMs: () => context.getRemainingTimeInMillis() },
  );
}

export const handler = middy(cleanupHandler).use(injectLambdaContext(logger)).use(logMetrics(metrics));
