// scripts/local/lambda-cpu-share.ts: the `node` that MiniStack starts for a
// function worker runs with its memory's share of a CPU; anything else runs
// as it is. Real cgroups, real processes.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { lambdaCpuShare, MB_PER_VCPU } from '../scripts/local/lambda-cpu-share.js';

// What a worker reports: CPU ms used while spinning for 1.5 s of wall time, and its cpu cgroup.
const SPIN = `
const t = process.cpuUsage(); const s = Date.now(); let x = 0;
while (Date.now() - s < 1500) x++;
const u = process.cpuUsage(t);
const cg = require('fs').readFileSync('/proc/self/cgroup', 'utf8').split('\\n')
  .find((l) => /(^|[:,])cpu([,:]|$)/.test(l) || l.startsWith('0::')) ?? '';
console.log(JSON.stringify({ cpuMs: (u.user + u.system) / 1000, wallMs: Date.now() - s, cgroup: cg, argv: process.argv.slice(1) }));
`;

let available = true;
let share: ReturnType<typeof lambdaCpuShare> | undefined;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'cpu-share-'));
try {
  share = lambdaCpuShare(process.execPath, work);
} catch (error) {
  available = false;
  console.warn(`skipped: ${(error as Error).message}`);
}

function run(memory: string | undefined) {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PATH: `${share?.dir}${path.delimiter}${process.env.PATH}`,
  };
  delete env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE;
  if (memory !== undefined) env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE = memory;
  return JSON.parse(execFileSync('node', ['-e', SPIN, 'an-arg'], { env }).toString()) as {
    cpuMs: number;
    wallMs: number;
    cgroup: string;
    argv: string[];
  };
}

afterAll(() => {
  share?.removeEmpty();
  fs.rmSync(work, { recursive: true, force: true });
});

describe.runIf(available)("Lambda's CPU share for the emulator's function workers", () => {
  it('a 512 MB worker gets at most 512/1,769 of a core, in a cgroup of its own', () => {
    const worker = run('512');
    // The quota is a ceiling: a loaded machine can only give it less.
    expect(worker.cpuMs / worker.wallMs).toBeLessThanOrEqual(512 / MB_PER_VCPU + 0.04);
    expect(worker.cpuMs).toBeGreaterThan(0);
    expect(worker.cgroup).toContain(`${path.basename(share?.cgroup ?? '')}/worker-`);
    expect(worker.cgroup).toMatch(/-512$/);
    expect(worker.argv).toEqual(['an-arg']);
  });

  it('a process without a function memory size runs as it is, outside the cgroups', () => {
    const other = run(undefined);
    expect(other.cgroup).not.toContain('worker-');
    expect(other.argv).toEqual(['an-arg']);
  });

  it('removes the cgroups of workers that have exited', () => {
    run('256');
    const root = share?.cgroup as string;
    expect(fs.readdirSync(root).filter((n) => n.startsWith('worker-')).length).toBeGreaterThan(0);
    share?.removeEmpty();
    expect(fs.existsSync(root)).toBe(false);
  });
});
