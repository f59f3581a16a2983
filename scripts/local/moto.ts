import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './free-port.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const VENV = path.join(ROOT, '.venv');
const REQUIREMENTS = path.join(ROOT, 'localstack', 'moto-requirements.txt');
const STAMP = path.join(VENV, '.moto-requirements.sha256');

/** An AWS API endpoint for local runs and tests, and how to stop it. */
export interface LocalAws {
  endpoint: string;
  source: 'env' | 'moto';
  stop(): Promise<void>;
}

function requirementsHash(): string {
  return createHash('sha256').update(fs.readFileSync(REQUIREMENTS)).digest('hex');
}

/**
 * Creates the project-local virtualenv with the pinned moto server unless it
 * is already there with the same requirements. Idempotent; safe to rerun.
 */
export function ensureMoto(log: (line: string) => void = () => {}): string {
  const bin = path.join(VENV, 'bin', 'moto_server');
  const hash = requirementsHash();
  if (fs.existsSync(bin) && fs.existsSync(STAMP) && fs.readFileSync(STAMP, 'utf8') === hash) {
    return bin;
  }
  log(`installing the AWS emulator (moto) into ${VENV}`);
  const python = process.env.PYTHON ?? 'python3';
  if (!fs.existsSync(path.join(VENV, 'bin', 'python'))) {
    execFileSync(python, ['-m', 'venv', VENV], { stdio: 'inherit' });
  }
  execFileSync(
    path.join(VENV, 'bin', 'pip'),
    ['install', '--disable-pip-version-check', '-q', '-r', REQUIREMENTS],
    { stdio: 'inherit' },
  );
  fs.writeFileSync(STAMP, hash);
  return bin;
}

async function waitUntilUp(endpoint: string, child: ChildProcess, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`moto_server exited with code ${child.exitCode}`);
    try {
      const response = await fetch(`${endpoint}/moto-api/`);
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`moto_server did not answer on ${endpoint} within ${timeoutMs} ms`);
}

/**
 * An AWS API emulator: `AWS_ENDPOINT_URL` if set (LocalStack, MiniStack, moto…);
 * otherwise starts the pinned moto server on a free loopback port.
 */
export async function startLocalAws(options: { log?: (line: string) => void } = {}): Promise<LocalAws> {
  if (process.env.AWS_ENDPOINT_URL) {
    return { endpoint: process.env.AWS_ENDPOINT_URL, source: 'env', stop: async () => {} };
  }
  const bin = ensureMoto(options.log);
  const port = await freePort();
  const child = spawn(bin, ['-H', '127.0.0.1', '-p', String(port)], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, MOTO_ALLOW_NONEXISTENT_REGION: 'true' },
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const endpoint = `http://127.0.0.1:${port}`;
  try {
    await waitUntilUp(endpoint, child, 30_000);
  } catch (error) {
    child.kill('SIGKILL');
    throw new Error(`${(error as Error).message}\n${stderr}`);
  }
  return {
    endpoint,
    source: 'moto',
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
