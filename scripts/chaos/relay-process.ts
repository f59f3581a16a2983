/**
 * One relay "function" of the chaos suite, in a process of its own so that it
 * can be SIGKILLed. It runs the deployed relay handler (functions/relay.ts,
 * configured by the same OUTBOX_* variables as serverless.yml) in a loop of
 * invocations, each with a time budget like a scheduled Lambda's. An
 * invocation that outlives its budget is treated as Lambda treats it: the
 * process exits (code 124) and the parent starts a fresh one, a cold start.
 *
 * Reports go to the parent over IPC; the relay's own JSON logs go to stdout,
 * which the parent writes to a file.
 *
 * Env: the relay's (DATABASE_URL, OUTBOX_*, AWS_*), plus CHAOS_BUDGET_MS
 * (invocation timeout) and CHAOS_BROKEN=1 (report events published without
 * sending them). A batch holding an event marked `chaosCrash` in its payload
 * kills the process (poison-crash.ts), the crash the relay must survive with
 * only that event dead-lettered.
 */
import type { Context } from 'aws-lambda';
import type { Publisher } from '../../lib/publish/types.js';
import { reportWithoutSending } from './broken-publisher.js';
import { crashOnPoison } from './poison-crash.js';
import { type RelayReport, TIMEOUT_EXIT_CODE } from './relay-protocol.js';

const budgetMs = Number(process.env.CHAOS_BUDGET_MS ?? 20_000);
const broken = process.env.CHAOS_BROKEN === '1';
const send = (report: RelayReport) => process.send?.(report);

const { createRelayHandler } = await import('../../functions/relay.js');
const reportCrash = (poisonId: string, neighbours: string[]) =>
  new Promise<void>((resolve) => {
    process.stderr.write(
      `chaos: poison row ${poisonId} kills this relay (batch of ${neighbours.length + 1})\n`,
    );
    if (!process.send) return resolve();
    process.send({ type: 'poison-crash', poisonId, neighbours } satisfies RelayReport, () => resolve());
  });
const handler = createRelayHandler({
  wrapPublisher: (publisher: Publisher) =>
    crashOnPoison(broken ? reportWithoutSending(publisher) : publisher, reportCrash),
});

let stopping = false;
process.on('SIGTERM', () => {
  stopping = true;
});
process.on('disconnect', () => {
  stopping = true; // the suite went away: finish this invocation and exit
});
send({ type: 'ready' });

let invocation = 0;
while (!stopping) {
  invocation++;
  const started = Date.now();
  const deadline = started + budgetMs;
  const context = {
    functionName: process.env.AWS_LAMBDA_FUNCTION_NAME ?? 'chaos-relay',
    awsRequestId: `chaos-${process.pid}-${invocation}`,
    getRemainingTimeInMillis: () => (stopping ? 0 : Math.max(0, deadline - Date.now())),
  } as unknown as Context;
  const timeout = setTimeout(() => {
    process.stderr.write(
      `invocation ${invocation} outlived its ${budgetMs} ms budget; exiting as Lambda would\n`,
    );
    process.exit(TIMEOUT_EXIT_CODE);
  }, budgetMs);
  try {
    const summary = await handler({ source: 'aws.events', 'detail-type': 'Scheduled Event' }, context);
    send({
      type: 'invocation',
      ms: Date.now() - started,
      claimed: summary.claimed,
      published: summary.published,
      retried: summary.retried,
      deadLettered: summary.deadLettered,
      leaseLost: summary.leaseLost,
    });
  } catch (error) {
    send({ type: 'error', ms: Date.now() - started, error: String(error).slice(0, 300) });
    process.stderr.write(`invocation ${invocation} failed: ${String(error)}\n`);
    // Lambda reports the error; the next scheduled invocation comes later.
    await new Promise((resolve) => setTimeout(resolve, 500));
  } finally {
    clearTimeout(timeout);
  }
}
process.exit(0);
