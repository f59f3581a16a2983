import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const POLL_MS = 200;
const WAIT_MS = 15 * 60_000;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function ageMs(file: string): number {
  try {
    return Date.now() - fs.statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Runs `install` while holding `<dir>.lock`, so that test files started side
 * by side in their own workers do not build one virtualenv at once (one of
 * them would find `bin/python` from `venv` and run a `pip` that is not there
 * yet). `isDone` is asked again once the lock is held: the holder before may
 * have installed it already. A lock left by a process that died is taken over.
 */
export function withInstallLock<T>(dir: string, isDone: () => T | undefined, install: () => T): T {
  const lock = `${dir}.lock`;
  const owner = `${lock}/pid`;
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    try {
      fs.mkdirSync(lock);
      fs.writeFileSync(owner, String(process.pid));
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    let holder = Number.NaN;
    try {
      holder = Number(fs.readFileSync(owner, 'utf8'));
    } catch {
      // the holder has made the folder but not yet written its pid
    }
    const orphan = Number.isNaN(holder) && ageMs(lock) > 60_000;
    if (orphan || (Number.isInteger(holder) && holder > 0 && !alive(holder))) {
      fs.rmSync(lock, { recursive: true, force: true });
      continue;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `waited ${WAIT_MS / 60_000} min for ${lock} (held by pid ${holder}); remove it if no install runs`,
      );
    }
    sleepSync(POLL_MS);
  }
  try {
    return isDone() ?? install();
  } finally {
    fs.rmSync(lock, { recursive: true, force: true });
  }
}

/**
 * `pip install -r requirements` into the virtualenv `venv`, made first when
 * it has no pip (`--clear`: a venv cut off half made, python there and pip
 * not, is made again). Call it holding the venv's install lock.
 */
export function pipInstall(venv: string, requirements: string): void {
  if (!fs.existsSync(path.join(venv, 'bin', 'pip'))) {
    execFileSync(process.env.PYTHON ?? 'python3', ['-m', 'venv', '--clear', venv], { stdio: 'inherit' });
  }
  execFileSync(
    path.join(venv, 'bin', 'pip'),
    ['install', '--disable-pip-version-check', '-q', '-r', requirements],
    { stdio: 'inherit' },
  );
}
