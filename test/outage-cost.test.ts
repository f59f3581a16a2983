// What an outage costs: a target that accepts connections and never answers
// (the worst kind: every call waits for its timeout, probes hang). Events
// waiting for it must not be claimed again before the target's next probe,
// and the log must say what happens per target, not per waiting event.
import net from 'node:net';
import { SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { RouteConfig } from '../lib/publish/routes.js';
import { awsClients } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';
import { emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();
const held: net.Socket[] = [];
const blackHole = net.createServer((socket) => void held.push(socket.resume()));
let endpoint = '';

beforeAll(async () => {
  await new Promise<void>((resolve) => blackHole.listen(0, '127.0.0.1', resolve));
  endpoint = `http://127.0.0.1:${(blackHole.address() as net.AddressInfo).port}`;
});
afterAll(async () => {
  for (const socket of held) socket.destroy();
  await new Promise((resolve) => blackHole.close(resolve));
});
beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

describe('an outage of a target that never answers', () => {
  it('claims each waiting event about once per probe, not every few hundred ms, and logs per target, not per event', async () => {
    const events = 300;
    await insertEvents(db.pool, events);
    // As the deployed relay's clients, with the timeouts shortened: a call
    // (and so a probe) hangs 3 s before it fails.
    const hangMs = 3_000;
    const sqs = new SQSClient({
      endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      maxAttempts: 1,
      requestHandler: { connectionTimeout: 300, requestTimeout: hangMs, throwOnRequestTimeout: true },
    });
    const routes: RouteConfig[] = [
      { match: '*', targets: [{ type: 'sqs', queueUrl: `${endpoint}/000000000000/orders` }] },
    ];
    const probeMaxMs = 2_000;
    const { relay, log } = emulatorRelay(
      db.pool,
      { ...aws, sqs },
      routes,
      { batchSize: 100, workers: 2, idleWaitMs: 50, leaseMs: 30_000 },
      { circuit: { failureThreshold: 3, probeBaseMs: 1_000, probeMaxMs } },
    );

    const runMs = 12_000;
    const deadline = Date.now() + runMs;
    const summary = await relay.run({ remainingMs: () => deadline - Date.now(), skipStats: true });

    expect(summary).toMatchObject({ published: 0, deadLettered: 0 });
    // Nothing spent: the environment's fault.
    const { rows } = await db.pool.query('SELECT max(attempts)::int AS max FROM outbox_events');
    expect(rows[0].max).toBeLessThanOrEqual(1);
    // Before: held for at most 500 ms while a probe hung, so each event was
    // claimed again every 500 ms of each 3 s hang. Now about once per probe
    // (the first claim, then one per probe: a 3 s hang and a 1-2 s wait).
    const claimsPerEvent = summary.claimed / events;
    expect(claimsPerEvent).toBeGreaterThanOrEqual(1);
    expect(claimsPerEvent).toBeLessThanOrEqual(1 + runMs / hangMs);
    // The log: the target's state changes and one summary per run, no line per event.
    const loud = log.lines.filter((l) => l.level !== 'debug');
    expect(loud.filter((l) => l.extra.event_id !== undefined)).toEqual([]);
    expect(loud.length).toBeLessThanOrEqual(3);
    const summaryLine = loud.find((l) => l.message.startsWith('events wait for unavailable targets'));
    expect(summaryLine?.extra.targets).toHaveProperty([`sqs:${endpoint}/000000000000/orders`]);
  }, 30_000);
});
