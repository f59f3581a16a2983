// Wake on commit through a real Lambda invoke: MiniStack runs a function
// (no Docker) that reports to a local HTTP server when it starts, and the
// waker invokes it asynchronously, debounced. This file starts its own
// MiniStack, whatever emulator the rest of the run uses.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { CreateFunctionCommand, GetFunctionCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../lib/errors.js';
import { createRelayWaker } from '../lib/outbox/relay-waker.js';
import { WAKE_SOURCE } from '../lib/relay/invocation.js';
import { type StackEmulator, startStackEmulator } from '../scripts/local/aws-emulator.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger } from './support/events.js';

const db = useTestDatabase();
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-waker-'));
let emulator: StackEmulator;
let lambda: LambdaClient;
let server: http.Server;
const starts: number[] = [];
/** The event each start of the "relay" was invoked with. */
const events: unknown[] = [];
/** How long the "relay" runs: a wake that waited for it would take this long at least. */
const RUN_MS = 2_000;
const FUNCTION = 'wake-probe';

async function until(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
}

beforeAll(async () => {
  server = http.createServer((req, res) => {
    starts.push(Date.now());
    let body = '';
    req.on('data', (chunk) => {
      body += chunk;
    });
    req.on('end', () => {
      events.push(JSON.parse(body || 'null'));
      res.end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  emulator = await startStackEmulator({ auth: false, env: { SERVICES: 'lambda,iam,sts,logs' } });
  lambda = new LambdaClient({
    endpoint: emulator.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    maxAttempts: 1,
  });
  // The "relay": reports its start and its event to the test's server, as a
  // woken relay would start claiming, then runs on for a while.
  fs.writeFileSync(
    path.join(work, 'index.mjs'),
    `export const handler = async (event) => { await fetch('http://127.0.0.1:${port}/started', { method: 'POST', body: JSON.stringify(event) }); await new Promise((r) => setTimeout(r, ${RUN_MS})); return 'ok'; };\n`,
  );
  execFileSync('python3', [
    '-m',
    'zipfile',
    '-c',
    path.join(work, 'probe.zip'),
    path.join(work, 'index.mjs'),
  ]);
  await lambda.send(
    new CreateFunctionCommand({
      FunctionName: FUNCTION,
      Runtime: 'nodejs22.x',
      Handler: 'index.handler',
      Role: 'arn:aws:iam::000000000000:role/wake-probe',
      Code: { ZipFile: fs.readFileSync(path.join(work, 'probe.zip')) },
      Timeout: 10,
    }),
  );
  await lambda.send(new GetFunctionCommand({ FunctionName: FUNCTION }));
}, 120_000);

afterAll(async () => {
  await emulator?.stop();
  server?.close();
  fs.rmSync(work, { recursive: true, force: true });
});

describe('createRelayWaker', () => {
  it('invokes the relay asynchronously after a commit, once for a burst of commits, again after a quiet spell', async () => {
    let clock = 0;
    const waker = createRelayWaker({ functionName: FUNCTION, lambda, keepAliveMs: 2_000, now: () => clock });
    const sentAt = Date.now();
    // Five commits within the keep-alive: one relay is woken and kept alive by them.
    const outcomes = [];
    for (let i = 0; i < 5; i++) {
      clock += 300;
      outcomes.push(await waker.wake());
    }
    expect(outcomes).toEqual(['invoked', 'debounced', 'debounced', 'debounced', 'debounced']);
    const invokeMs = Date.now() - sentAt;
    expect(waker.invocations).toBe(1);
    // Asynchronous (InvocationType Event): the wake did not wait for the run.
    expect(invokeMs).toBeLessThan(RUN_MS);
    await until(() => starts.length >= 1, 30_000);
    expect(starts).toHaveLength(1);
    // The relay's handler tells a wake from a schedule tick by this event.
    expect(events[0]).toEqual({ source: WAKE_SOURCE });
    console.log(
      `waker: 5 wakes sent in ${invokeMs} ms; the function started ${(starts[0] as number) - sentAt} ms after the first`,
    );

    // A quiet spell longer than the keep-alive: the next commit wakes a relay again.
    clock += 2_500;
    expect(await waker.wake()).toBe('invoked');
    expect(waker.invocations).toBe(2);
    await until(() => starts.length >= 2, 30_000);
    expect(starts).toHaveLength(2);
  }, 90_000);

  it('with the database: no invoke while a relay holds a slot; one per commit while none does', async () => {
    const waker = createRelayWaker({ functionName: FUNCTION, lambda, db: db.pool });
    await db.pool.query('TRUNCATE outbox_relay_slots');
    const before = starts.length;
    // No relay running: every commit wakes one (no per-process debounce).
    await waker.wake();
    await waker.wake();
    expect(waker.invocations).toBe(2);
    await until(() => starts.length >= before + 2, 30_000);
    expect(starts).toHaveLength(before + 2);
    // A relay holds a slot: it takes the events; nothing is invoked.
    await db.pool.query(
      "INSERT INTO outbox_relay_slots VALUES (0, gen_random_uuid(), now() + interval '1 minute')",
    );
    for (let i = 0; i < 5; i++) expect(await waker.wake()).toBe('relay-running');
    expect(waker.invocations).toBe(2);
    expect(waker.skippedWhileRunning).toBe(5);
    // Its time is up (it died): a slot past its time holds nothing.
    await db.pool.query("UPDATE outbox_relay_slots SET held_until = now() - interval '1 second'");
    await waker.wake();
    expect(waker.invocations).toBe(3);
    // Its start comes here, not during the next test.
    await until(() => starts.length >= before + 3, 30_000);
    expect(starts).toHaveLength(before + 3);
  }, 90_000);

  it('a look at the slots that fails wakes the relay anyway, and says so', async () => {
    const log = captureLogger();
    // No such schema: the look fails as it would with the database away.
    const waker = createRelayWaker({
      functionName: FUNCTION,
      lambda,
      db: db.pool,
      schema: 'no_such_schema',
      logger: log.logger,
    });
    const before = starts.length;
    expect(await waker.wake()).toBe('invoked');
    expect(log.lines.map((l) => [l.level, l.message])).toEqual([
      ['warn', 'could not look for a running relay; waking it'],
    ]);
    await until(() => starts.length >= before + 1, 30_000);
    expect(starts).toHaveLength(before + 1);
  }, 60_000);

  it('a wake that fails is logged, never thrown, and the next commit tries again', async () => {
    const log = captureLogger();
    const waker = createRelayWaker({ functionName: 'no-such-function', lambda, logger: log.logger });
    await expect(waker.wake()).resolves.toBe('failed');
    await expect(waker.wake()).resolves.toBe('failed');
    expect(waker.invocations).toBe(2);
    expect(log.lines.map((l) => [l.level, l.message])).toEqual([
      ['warn', 'could not wake the relay; the schedule will publish the events'],
      ['warn', 'could not wake the relay; the schedule will publish the events'],
    ]);
    expect(String(log.lines[0]?.extra.error)).toMatch(/ResourceNotFound|not found|Function not found/i);
  });

  it('refuses to be built without a function name', () => {
    expect(() => createRelayWaker({ functionName: '' })).toThrow(ConfigError);
    expect(() => createRelayWaker({ functionName: 'relay', keepAliveMs: -1 })).toThrow(/keepAliveMs/);
  });
});
