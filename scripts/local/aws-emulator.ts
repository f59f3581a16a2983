import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './free-port.js';
import { pipInstall, withInstallLock } from './install-lock.js';
import { lambdaCpuShare } from './lambda-cpu-share.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * MiniStack's own log level. At INFO it logs a line for every request it
 * serves, about 6% of its single core while a relay drains (py-spy); every
 * deployed test and benchmark waits on that core. Its warnings and errors
 * still show. `MINISTACK_LOG_LEVEL=INFO` brings the request lines back.
 * The deployed functions set POWERTOOLS_LOG_LEVEL, which wins over the
 * LOG_LEVEL they inherit from MiniStack.
 */
const MINISTACK_LOG_LEVEL = process.env.MINISTACK_LOG_LEVEL ?? 'WARNING';

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
      LOG_LEVEL: MINISTACK_LOG_LEVEL,
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
 * already there with the same requirements. Idempotent; safe to rerun, and
 * to run from several processes at once (one installs, the others wait).
 */
export function ensureEmulator(name: EmulatorName, log: (line: string) => void = () => {}): string {
  const spec = EMULATORS[name];
  const bin = path.join(spec.venv, 'bin', spec.bin);
  const stamp = path.join(spec.venv, '.requirements.sha256');
  const hash = requirementsHash(spec);
  const installed = () =>
    fs.existsSync(bin) && fs.existsSync(stamp) && fs.readFileSync(stamp, 'utf8') === hash ? bin : undefined;
  return (
    installed() ??
    withInstallLock(spec.venv, installed, () => {
      log(`installing the AWS emulator (${name}) into ${spec.venv}`);
      pipInstall(spec.venv, spec.requirements);
      fs.writeFileSync(stamp, hash);
      return bin;
    })
  );
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

/** A MiniStack process group running the whole deployed stack. */
export interface StackEmulator {
  endpoint: string;
  pid: number;
  /**
   * CPU seconds (user + system) used so far by each live process MiniStack
   * started whose command line contains `marker` (a function's Lambda
   * workers: its name), by pid. Read from /proc (Linux).
   */
  processCpuSeconds(marker: string): Map<number, number>;
  /** CPU seconds (user + system, all its threads) used so far by MiniStack's own server process. */
  serverCpuSeconds(): number;
  /** Stops MiniStack and every process it started (Lambda workers included). */
  stop(): Promise<void>;
}

let clockTicks: number | undefined;

/** User + system CPU seconds of one process (all its threads), read from /proc (Linux). */
function processCpu(pid: number): number {
  clockTicks ??= Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  // After "pid (comm) ": state is field 3; utime and stime are fields 14 and 15.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / clockTicks;
}

/** User + system CPU seconds of the descendants of `pid` whose command line contains `marker`. */
function descendantsCpu(pid: number, marker: string): Map<number, number> {
  const found = new Map<number, number>();
  for (const child of descendants(pid)) {
    try {
      const cmdline = fs.readFileSync(`/proc/${child}/cmdline`, 'utf8').replaceAll('\0', ' ');
      if (!cmdline.includes(marker)) continue;
      found.set(child, processCpu(child));
    } catch {
      // the process ended while we looked
    }
  }
  return found;
}

/** Pids of `pid`'s descendants, read from /proc (Linux). */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      // pid (comm) state ppid ...; comm may hold spaces and parentheses.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(entry));
      children.set(ppid, list);
    } catch {
      // the process ended while we looked
    }
  }
  const found: number[] = [];
  const stack = [pid];
  while (stack.length > 0) {
    for (const child of children.get(stack.pop() as number) ?? []) {
      found.push(child);
      stack.push(child);
    }
  }
  return found;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * MiniStack with every service and its local Lambda executor, for deploying
 * serverless.yml as it is (`scripts/local/stack.ts`). `auth` makes it enforce
 * IAM and hand each function its execution role's credentials. It runs in a
 * process group of its own; `stop()` ends the group and then any descendant
 * that left it (by pid, never by name), so no Lambda worker outlives it
 * holding database sessions. `env` reaches MiniStack and, through it, every
 * function it runs (MiniStack passes its own environment on); `nodeDir` is
 * put first on PATH so the functions run on that Node.
 *
 * `frontPort`: the port of a proxy in front of MiniStack (FaultProxy). The
 * queue URLs MiniStack hands out and the endpoint its functions call
 * (AWS_ENDPOINT_URL, which it sets to its own gateway port) name that port,
 * so every AWS call a deployed function makes (SQS at its queue URL's host
 * included) crosses the proxy. MiniStack itself listens on `endpoint`: the
 * deployer and the benchmark's own calls go to it directly. It is served
 * the way `ministack -d` serves it (hypercorn on ministack.app:app).
 */
export async function startStackEmulator(
  options: {
    auth?: boolean;
    env?: Record<string, string>;
    nodeDir?: string;
    frontPort?: number;
    /**
     * Each function worker runs with its memory's share of a CPU, as in
     * Lambda (scripts/local/lambda-cpu-share.ts; Linux cgroups, root).
     */
    cpuShare?: boolean;
    log?: (line: string) => void;
  } = {},
): Promise<StackEmulator> {
  const spec = EMULATORS.ministack;
  const bin = ensureEmulator('ministack', options.log);
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    GATEWAY_PORT: String(options.frontPort ?? port),
    BIND_HOST: '127.0.0.1',
    // Queue URLs and ARNs name 127.0.0.1, the address the functions reach it on.
    MINISTACK_HOST: '127.0.0.1',
    AUTH: options.auth === false ? 'false' : 'true',
    IOT_MTLS_ENABLED: '0',
    SFTP_ENABLED: '0',
    LOG_LEVEL: MINISTACK_LOG_LEVEL,
    ...options.env,
  };
  // Values for the host's tools must not leak into the functions.
  for (const name of ['AWS_ENDPOINT_URL', 'DATABASE_URL', 'NODE_OPTIONS', 'SERVICES']) {
    if (!options.env || !(name in options.env)) delete env[name];
  }
  if (options.nodeDir) env.PATH = `${options.nodeDir}${path.delimiter}${env.PATH ?? ''}`;
  const cpuShare = options.cpuShare
    ? lambdaCpuShare(
        options.nodeDir ? fs.realpathSync(path.join(options.nodeDir, 'node')) : process.execPath,
        path.join(ROOT, '.local'),
      )
    : undefined;
  if (cpuShare) env.PATH = `${cpuShare.dir}${path.delimiter}${env.PATH ?? ''}`;
  const [command, args] =
    options.frontPort === undefined
      ? [bin, []]
      : [
          path.join(spec.venv, 'bin', 'python'),
          ['-m', 'hypercorn', 'ministack.app:app', '--bind', `127.0.0.1:${port}`, '--keep-alive', '75'],
        ];
  const child = spawn(command, args, {
    stdio: ['ignore', 'ignore', 'pipe'],
    cwd: spec.venv,
    env,
    detached: true,
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const pid = child.pid as number;
  const endpoint = `http://127.0.0.1:${port}`;
  const stop = async () => {
    const family = descendants(pid);
    const signal = (sig: NodeJS.Signals) => {
      try {
        process.kill(-pid, sig);
      } catch {
        // the group is gone
      }
      for (const p of family) {
        try {
          process.kill(p, sig);
        } catch {
          // already ended
        }
      }
    };
    signal('SIGTERM');
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline && [pid, ...family].some(alive)) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    if ([pid, ...family].some(alive)) signal('SIGKILL');
    cpuShare?.removeEmpty();
  };
  try {
    await waitUntilUp(`${endpoint}${spec.health}`, child, 60_000);
  } catch (error) {
    await stop();
    throw new Error(`${(error as Error).message}\n${stderr}`);
  }
  child.unref();
  return {
    endpoint,
    pid,
    stop,
    processCpuSeconds: (marker) => descendantsCpu(pid, marker),
    serverCpuSeconds: () => processCpu(pid),
  };
}

/** Sets the environment the AWS SDK needs to talk to a local emulator. */
export function useLocalAwsEnv(endpoint: string): void {
  process.env.AWS_ENDPOINT_URL = endpoint;
  process.env.AWS_REGION ??= 'us-east-1';
  process.env.AWS_ACCESS_KEY_ID ??= 'test';
  process.env.AWS_SECRET_ACCESS_KEY ??= 'test';
}
