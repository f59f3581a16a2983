import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './free-port.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The emulators this project can start by itself, each from pinned PyPI
 * requirements in a project-local virtualenv (git-ignored). moto is the
 * default; MiniStack is much faster for deep queues (moto's SQS slows down
 * with queue depth), so the benchmark and `npm start` prefer it.
 */
export type EmulatorName = 'moto' | 'ministack';

interface EmulatorSpec {
  venv: string;
  requirements: string;
  bin: string;
  args: (port: number) => string[];
  env: (port: number) => Record<string, string>;
  health: string;
}

const EMULATORS: Record<EmulatorName, EmulatorSpec> = {
  moto: {
    venv: path.join(ROOT, '.venv'),
    requirements: path.join(ROOT, 'localstack', 'moto-requirements.txt'),
    bin: 'moto_server',
    args: (port) => ['-H', '127.0.0.1', '-p', String(port)],
    env: () => ({ MOTO_ALLOW_NONEXISTENT_REGION: 'true' }),
    health: '/moto-api/',
  },
  ministack: {
    venv: path.join(ROOT, '.local', 'ministack'),
    requirements: path.join(ROOT, 'localstack', 'ministack-requirements.txt'),
    bin: 'ministack',
    args: () => [],
    env: (port) => ({
      GATEWAY_PORT: String(port),
      BIND_HOST: '127.0.0.1',
      SERVICES: 'sqs,events,secretsmanager',
      IOT_MTLS_ENABLED: '0',
      SFTP_ENABLED: '0',
    }),
    health: '/_ministack/health',
  },
};

/** An AWS API endpoint for local runs and tests, and how to stop it. */
export interface LocalAws {
  endpoint: string;
  source: 'env' | EmulatorName;
  /** Process id of the emulator this process started (absent for `AWS_ENDPOINT_URL`). */
  pid?: number;
  stop(): Promise<void>;
}

function requirementsHash(spec: EmulatorSpec): string {
  return createHash('sha256').update(fs.readFileSync(spec.requirements)).digest('hex');
}

/**
 * Creates the emulator's virtualenv from its pinned requirements unless it is
 * already there with the same requirements. Idempotent; safe to rerun.
 */
export function ensureEmulator(name: EmulatorName, log: (line: string) => void = () => {}): string {
  const spec = EMULATORS[name];
  const bin = path.join(spec.venv, 'bin', spec.bin);
  const stamp = path.join(spec.venv, '.requirements.sha256');
  const hash = requirementsHash(spec);
  if (fs.existsSync(bin) && fs.existsSync(stamp) && fs.readFileSync(stamp, 'utf8') === hash) {
    return bin;
  }
  log(`installing the AWS emulator (${name}) into ${spec.venv}`);
  const python = process.env.PYTHON ?? 'python3';
  if (!fs.existsSync(path.join(spec.venv, 'bin', 'python'))) {
    execFileSync(python, ['-m', 'venv', spec.venv], { stdio: 'inherit' });
  }
  execFileSync(
    path.join(spec.venv, 'bin', 'pip'),
    ['install', '--disable-pip-version-check', '-q', '-r', spec.requirements],
    { stdio: 'inherit' },
  );
  fs.writeFileSync(stamp, hash);
  return bin;
}

async function waitUntilUp(url: string, child: ChildProcess, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`the emulator exited with code ${child.exitCode}`);
    try {
      const response = await fetch(url);
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`the emulator did not answer on ${url} within ${timeoutMs} ms`);
}

/**
 * An AWS API emulator: `AWS_ENDPOINT_URL` if set (LocalStack, MiniStack, moto…);
 * otherwise starts one on a free loopback port: `emulator`, else
 * `OUTBOX_EMULATOR`, else moto.
 */
export async function startLocalAws(
  options: { emulator?: EmulatorName; log?: (line: string) => void } = {},
): Promise<LocalAws> {
  if (process.env.AWS_ENDPOINT_URL) {
    return { endpoint: process.env.AWS_ENDPOINT_URL, source: 'env', stop: async () => {} };
  }
  const requested = options.emulator ?? process.env.OUTBOX_EMULATOR ?? 'moto';
  if (requested !== 'moto' && requested !== 'ministack') {
    throw new Error(`OUTBOX_EMULATOR: expected "moto" or "ministack", got "${requested}"`);
  }
  const name: EmulatorName = requested;
  const spec = EMULATORS[name];
  const bin = ensureEmulator(name, options.log);
  const port = await freePort();
  const child = spawn(bin, spec.args(port), {
    stdio: ['ignore', 'ignore', 'pipe'],
    cwd: spec.venv,
    env: { ...process.env, ...spec.env(port) },
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const endpoint = `http://127.0.0.1:${port}`;
  try {
    await waitUntilUp(`${endpoint}${spec.health}`, child, 60_000);
  } catch (error) {
    child.kill('SIGKILL');
    throw new Error(`${(error as Error).message}\n${stderr}`);
  }
  return {
    endpoint,
    source: name,
    pid: child.pid,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 3000).unref();
      }),
  };
}

/** Sets the environment the AWS SDK needs to talk to a local emulator. */
export function useLocalAwsEnv(endpoint: string): void {
  process.env.AWS_ENDPOINT_URL = endpoint;
  process.env.AWS_REGION ??= 'us-east-1';
  process.env.AWS_ACCESS_KEY_ID ??= 'test';
  process.env.AWS_SECRET_ACCESS_KEY ??= 'test';
}
