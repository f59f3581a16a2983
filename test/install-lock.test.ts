// scripts/local/install-lock.ts: test files that start side by side install a
// virtualenv once; the others wait and use it. Real processes, real files.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { withInstallLock } from '../scripts/local/install-lock.js';

const LOCK = fileURLToPath(new URL('../scripts/local/install-lock.ts', import.meta.url));

// One installer process: slow install that logs its start and end, done when the stamp is there.
const INSTALLER = `
import fs from 'node:fs';
import { withInstallLock } from ${JSON.stringify(LOCK)};
const [dir, log] = process.argv.slice(1);
const stamp = dir + '/stamp';
const done = () => (fs.existsSync(stamp) ? 'installed' : undefined);
const result = done() ?? withInstallLock(dir, done, () => {
  fs.appendFileSync(log, 'start ' + process.pid + '\\n');
  fs.mkdirSync(dir, { recursive: true });
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 400);
  fs.writeFileSync(stamp, 'x');
  fs.appendFileSync(log, 'end ' + process.pid + '\\n');
  return 'installed';
});
console.log(result);
`;

function installer(dir: string, log: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [
      '--import',
      'tsx',
      '--input-type=module',
      '-e',
      INSTALLER,
      dir,
      log,
    ]);
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
    });
    child.stderr.on('data', (chunk) => {
      err += chunk;
    });
    child.on('exit', (code) =>
      code === 0 ? resolve(out.trim()) : reject(new Error(`exit ${code}: ${err}`)),
    );
  });
}

describe('withInstallLock', () => {
  it('lets one of four processes started at once install; the others wait and find it installed', async () => {
    const work = fs.mkdtempSync(path.join(os.tmpdir(), 'install-lock-'));
    const dir = path.join(work, 'sub', 'venv');
    const log = path.join(work, 'log');
    const results = await Promise.all([1, 2, 3, 4].map(() => installer(dir, log)));
    expect(results).toEqual(['installed', 'installed', 'installed', 'installed']);
    const lines = fs.readFileSync(log, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^start \d+$/);
    expect(lines[1]).toBe(String(lines[0]).replace('start', 'end'));
    expect(fs.existsSync(`${dir}.lock`)).toBe(false);
  }, 60_000);

  it('takes over a lock left by a process that died, and releases it when install throws', () => {
    const work = fs.mkdtempSync(path.join(os.tmpdir(), 'install-lock-'));
    const dir = path.join(work, 'venv');
    fs.mkdirSync(`${dir}.lock`);
    // A pid above the kernel's limit (4194304) names no process.
    fs.writeFileSync(`${dir}.lock/pid`, '4194400');
    expect(
      withInstallLock(
        dir,
        () => undefined,
        () => 'mine',
      ),
    ).toBe('mine');
    expect(fs.existsSync(`${dir}.lock`)).toBe(false);
    expect(() =>
      withInstallLock(
        dir,
        () => undefined,
        () => {
          throw new Error('pip failed');
        },
      ),
    ).toThrow('pip failed');
    expect(fs.existsSync(`${dir}.lock`)).toBe(false);
  });
});
