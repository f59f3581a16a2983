// Wake on commit through a real Lambda invoke: MiniStack runs a function
// (no Docker) that reports to a local HTTP server when it starts, and the
// waker invokes it asynchronously, debounced. This file starts its own
// MiniStack, whatever emulator the rest of the run uses. Then a real Lambda
// client against endpoints that hang, refuse or throttle: a wake keeps its
// commit waiting 50 ms at most, and wakes back off after a failure.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { CreateFunctionCommand, GetFunctionCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { migrate } from '../lib/db/migrate.js';
import { ConfigError } from '../lib/errors.js';
import { createRelayWaker, type RelayWaker } from '../lib/outbox/relay-waker.js';
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
    // waitMs: each wake waits for Lambda's answer, so its outcome is definite.
    const waker = createRelayWaker({
      functionName: FUNCTION,
      lambda,
      keepAliveMs: 2_000,
      waitMs: 10_000,
      now: () => clock,
    });
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

  it('with the database: one invoke between producers while no relay holds a slot, none while one does, again once a relay took or let go of its slot', async () => {
    // Two producer processes, each with its waker; the woken relay's start
    // (a cold start) may take up to 1.5 s.
    const wakers = [0, 1].map(() =>
      createRelayWaker({ functionName: FUNCTION, lambda, db: db.pool, startGraceMs: 1_500, waitMs: 10_000 }),
    );
    const [a, b] = wakers as [RelayWaker, RelayWaker];
    const invocations = () => a.invocations + b.invocations;
    await db.pool.query('TRUNCATE outbox_relay_slots, outbox_relay_wake');
    const before = starts.length;
    // No relay running: the first commit wakes one; the next, from either
    // producer, find it starting.
    expect(await a.wake()).toBe('invoked');
    expect([await b.wake(), await a.wake(), await b.wake()]).toEqual(['debounced', 'debounced', 'debounced']);
    expect(invocations()).toBe(1);
    await until(() => starts.length >= before + 1, 30_000);
    // A relay takes a slot: it takes the events; nothing is invoked.
    await db.pool.query(
      "INSERT INTO outbox_relay_slots VALUES (0, gen_random_uuid(), now() + interval '1 minute')",
    );
    for (let i = 0; i < 5; i++) expect(await wakers[i % 2]?.wake()).toBe('relay-running');
    expect(a.skippedWhileRunning + b.skippedWhileRunning).toBe(5);
    // It dies (its time is up): a slot past its time holds nothing, and the
    // relay's taking the slot ended the start's window: the next commit wakes one.
    await db.pool.query("UPDATE outbox_relay_slots SET held_until = now() - interval '1 second'");
    expect(await b.wake()).toBe('invoked');
    expect(invocations()).toBe(2);
    // This relay never takes a slot (the probe does not): wakes invoke
    // nothing for the start's window only, then one wakes it again.
    const silencedAt = Date.now();
    expect(await a.wake()).toBe('debounced');
    await new Promise((r) => setTimeout(r, Math.max(0, silencedAt + 1_600 - Date.now())));
    expect(await a.wake()).toBe('invoked');
    expect(invocations()).toBe(3);
    // A relay that lets its slot go (it leaves) ends the window too.
    await db.pool.query(
      "INSERT INTO outbox_relay_slots VALUES (1, gen_random_uuid(), now() + interval '1 minute')",
    );
    expect(await a.wake()).toBe('relay-running');
    await db.pool.query('DELETE FROM outbox_relay_slots WHERE slot = 1');
    expect(await b.wake()).toBe('invoked');
    expect(invocations()).toBe(4);
    // Their starts come here, not during the next test.
    await until(() => starts.length >= before + 4, 30_000);
    expect(starts).toHaveLength(before + 4);
  }, 90_000);

  it('in a schema of its own (migrate --schema, OUTBOX_SCHEMA): wakes share their marker there, and a relay taking a slot there ends the window', async () => {
    await migrate({ databaseUrl: db.url, schema: 'wake_schema' });
    // Said once, in the environment, as every entry point reads it.
    process.env.OUTBOX_SCHEMA = 'wake_schema';
    onTestFinished(() => {
      delete process.env.OUTBOX_SCHEMA;
    });
    const marker = async () => (await db.pool.query('SELECT woken_at FROM outbox_relay_wake')).rows;
    const defaultMarker = await marker();
    const waker = createRelayWaker({
      functionName: FUNCTION,
      lambda,
      db: db.pool, // its search_path does not name the schema
      waitMs: 10_000,
    });
    const before = starts.length;
    expect(await waker.wake()).toBe('invoked');
    expect(await waker.wake()).toBe('debounced');
    await db.pool.query(
      `INSERT INTO "wake_schema".outbox_relay_slots VALUES (0, gen_random_uuid(), now() + interval '1 minute')`,
    );
    expect(await waker.wake()).toBe('relay-running');
    await db.pool.query('DELETE FROM "wake_schema".outbox_relay_slots');
    expect(await waker.wake()).toBe('invoked');
    // The default schema's marker was not touched.
    expect(await marker()).toEqual(defaultMarker);
    await until(() => starts.length >= before + 2, 30_000);
    expect(starts).toHaveLength(before + 2);
  }, 60_000);

  it('a look at the slots that fails wakes the relay anyway, and says so', async () => {
    const log = captureLogger();
    // No such schema: the look fails as it would with the database away.
    const waker = createRelayWaker({
      functionName: FUNCTION,
      lambda,
      db: db.pool,
      schema: 'no_such_schema',
      waitMs: 10_000,
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

  it('a wake that fails is logged, never thrown; the next wakes back off, then one tries again', async () => {
    const log = captureLogger();
    let clock = 0;
    const waker = createRelayWaker({
      functionName: 'no-such-function',
      lambda,
      waitMs: 10_000,
      logger: log.logger,
      now: () => clock,
    });
    await expect(waker.wake()).resolves.toBe('failed');
    clock += 900;
    await expect(waker.wake()).resolves.toBe('backing-off');
    clock += 200;
    await expect(waker.wake()).resolves.toBe('failed');
    expect(waker.invocations).toBe(2);
    expect(log.lines.map((l) => [l.level, l.message, l.extra.backoff_ms])).toEqual([
      ['warn', 'could not wake the relay; the schedule will publish the events', 1_000],
      ['warn', 'could not wake the relay; the schedule will publish the events', 2_000],
    ]);
    expect(String(log.lines[0]?.extra.error)).toMatch(/ResourceNotFound|not found|Function not found/i);
  });

  it('refuses to be built without a function name', () => {
    expect(() => createRelayWaker({ functionName: '' })).toThrow(ConfigError);
    expect(() => createRelayWaker({ functionName: 'relay', keepAliveMs: -1 })).toThrow(/keepAliveMs/);
    expect(() => createRelayWaker({ functionName: 'relay', waitMs: Number.NaN })).toThrow(/waitMs/);
  });
});

/** A local endpoint for a real Lambda client: one that never answers, or answers 429. */
async function endpoint(
  kind: 'hung' | 'throttled',
): Promise<{ url: string; requests: () => number; close(): Promise<void> }> {
  let requests = 0;
  const server = http.createServer((req, res) => {
    requests++;
    req.resume();
    if (kind === 'hung') return; // accepts, reads, never answers
    res.writeHead(429, {
      'content-type': 'application/json',
      'x-amzn-errortype': 'TooManyRequestsException',
    });
    res.end(
      JSON.stringify({
        Type: 'User',
        message: 'Rate Exceeded.',
        Reason: 'ReservedFunctionConcurrentInvocationLimitExceeded',
      }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests: () => requests,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** A port nothing listens on: connections are refused. */
async function refusedEndpoint(): Promise<{ url: string; requests: () => number; close(): Promise<void> }> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return { url: `http://127.0.0.1:${port}`, requests: () => 0, close: async () => {} };
}

/** What a wake may add to a commit: 50 ms, and an allowance for a loaded machine. */
const WAKE_BUDGET_MS = 50 + 100;

describe('a Lambda endpoint that fails', () => {
  it.each([
    ['hangs', () => endpoint('hung')],
    ['refuses connections', refusedEndpoint],
    ['throttles (429 TooManyRequestsException)', () => endpoint('throttled')],
  ])(
    'that %s: each wake returns within 50 ms, and after the failure wakes back off, doubling',
    async (_, start) => {
      const target = await start();
      // A real client, as the waker builds one (two attempts).
      const client = new LambdaClient({
        endpoint: target.url,
        region: 'us-east-1',
        credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
        maxAttempts: 2,
      });
      const log = captureLogger();
      let clock = 0;
      const waker = createRelayWaker({
        functionName: 'relay',
        lambda: client,
        timeoutMs: 1_000,
        logger: log.logger,
        now: () => clock,
      });
      let slowestMs = 0;
      let wakes = 0;
      /** A wake, which must not keep its commit waiting. */
      const timed = async () => {
        const started = performance.now();
        const outcome = await waker.wake();
        const ms = performance.now() - started;
        slowestMs = Math.max(slowestMs, ms);
        wakes++;
        expect(ms).toBeLessThan(WAKE_BUDGET_MS);
        return outcome;
      };
      try {
        expect(['in-flight', 'failed']).toContain(await timed());
        // The Invoke fails in the background (its timeout, at the latest);
        // meanwhile a commit's wake does not start another.
        while (log.lines.length === 0) {
          expect(await timed()).toBe('in-flight');
          await new Promise((r) => setTimeout(r, 50));
        }
        expect(log.lines.map((l) => [l.message, l.extra.backoff_ms])).toEqual([
          ['could not wake the relay; the schedule will publish the events', 1_000],
        ]);
        expect(waker.invocations).toBe(1);
        const requests = target.requests();
        // Backing off: no Invoke, and nothing sent.
        for (let i = 0; i < 5; i++) {
          clock += 150;
          expect(await timed()).toBe('backing-off');
        }
        expect(waker.invocations).toBe(1);
        expect(target.requests()).toBe(requests);
        // The backoff over, a wake tries again; it fails, and the next backoff is twice as long.
        clock += 1_000;
        expect(['in-flight', 'failed']).toContain(await timed());
        expect(waker.invocations).toBe(2);
        while (log.lines.length < 2) await new Promise((r) => setTimeout(r, 50));
        expect(log.lines[1]?.extra.backoff_ms).toBe(2_000);
        clock += 1_500;
        expect(await timed()).toBe('backing-off');
        expect(waker.invocations).toBe(2);
        console.log(`a Lambda endpoint that ${_}: slowest of ${wakes} wakes ${Math.round(slowestMs)} ms`);
      } finally {
        client.destroy();
        await target.close();
      }
    },
    30_000,
  );
});
