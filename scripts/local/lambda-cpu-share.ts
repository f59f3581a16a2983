// Lambda's CPU share for the emulator's function workers.
//
// In AWS a function gets CPU in proportion to its memory: 1,769 MB is one
// vCPU, 512 MB 0.29 of one. MiniStack's local executor runs each function's
// worker as an ordinary process with the whole machine to use, so a
// function bound by its CPU (a cold start, a relay draining a backlog) runs
// faster there than it would in AWS, and billed duration × memory says
// nothing about memory sizes. This gives each worker its own share: MiniStack
// runs `node` from PATH; the folder returned here holds a `node` that, when
// started with AWS_LAMBDA_FUNCTION_MEMORY_SIZE in its environment (a function
// worker, not MiniStack's own tools), puts itself in a cgroup of its own
// whose CPU quota is memory / 1,769 of a core, then becomes the real node.
// Linux cgroups (v1's cpu controller or v2's cpu.max), writable by this user
// (root here); local benchmarks only.

import fs from 'node:fs';
import path from 'node:path';

/** MB of memory per vCPU in Lambda. */
export const MB_PER_VCPU = 1_769;
const PERIOD_US = 100_000;

export interface LambdaCpuShare {
  /** Put first on MiniStack's PATH. */
  dir: string;
  /** The cgroup folder holding one cgroup per worker. */
  cgroup: string;
  /** Removes the cgroups of workers that have exited, and the folder if it is empty. */
  removeEmpty(): void;
}

function cgroupRoot(): { base: string; version: 1 | 2 } {
  const v1 = '/sys/fs/cgroup/cpu';
  if (fs.existsSync(path.join(v1, 'cpu.cfs_quota_us'))) return { base: v1, version: 1 };
  const v2 = '/sys/fs/cgroup';
  const controllers = path.join(v2, 'cgroup.controllers');
  if (fs.existsSync(controllers) && fs.readFileSync(controllers, 'utf8').split(/\s+/).includes('cpu'))
    return { base: v2, version: 2 };
  throw new Error(
    "Lambda's CPU share needs Linux cgroups with the cpu controller (/sys/fs/cgroup/cpu, or cpu in /sys/fs/cgroup/cgroup.controllers); run without it",
  );
}

/**
 * A PATH folder whose `node` runs `realNode` in a cgroup with a function's
 * CPU share (see the file's comment). Throws a clear error where cgroups
 * cannot be written. `removeEmpty()` removes the cgroups of workers that
 * have exited (call it after the emulator stops).
 */
export function lambdaCpuShare(realNode: string, workDir: string): LambdaCpuShare {
  const { base, version } = cgroupRoot();
  const cgroup = path.join(base, `pg-lambda-outbox-${process.pid}`);
  try {
    fs.mkdirSync(cgroup, { recursive: true });
    if (version === 2) {
      fs.writeFileSync(path.join(base, 'cgroup.subtree_control'), '+cpu');
      fs.writeFileSync(path.join(cgroup, 'cgroup.subtree_control'), '+cpu');
    }
  } catch (error) {
    throw new Error(
      `Lambda's CPU share: cannot create the cgroup ${cgroup} (${(error as Error).message}); it needs root or a delegated cgroup; run without it`,
    );
  }
  const dir = path.join(workDir, `cpu-share-${process.pid}`);
  fs.mkdirSync(dir, { recursive: true });
  // The quota: memory × period / 1,769 µs per period of 100 ms.
  const limit =
    version === 1
      ? `echo "$quota" > "$d/cpu.cfs_quota_us" && echo ${PERIOD_US} > "$d/cpu.cfs_period_us" && echo $$ > "$d/cgroup.procs"`
      : `echo "$quota ${PERIOD_US}" > "$d/cpu.max" && echo $$ > "$d/cgroup.procs"`;
  const script = `#!/bin/sh
# Written by scripts/local/lambda-cpu-share.ts: a function worker runs with
# its memory's share of a CPU, as in Lambda; anything else runs as it is.
if [ -n "$AWS_LAMBDA_FUNCTION_MEMORY_SIZE" ]; then
  quota=$(( AWS_LAMBDA_FUNCTION_MEMORY_SIZE * ${PERIOD_US} / ${MB_PER_VCPU} ))
  d="${cgroup}/worker-$$-$AWS_LAMBDA_FUNCTION_MEMORY_SIZE"
  if ! { mkdir "$d" && ${limit}; }; then
    echo "lambda-cpu-share: could not limit worker $$ in $d" >&2
    exit 70
  fi
fi
exec "${realNode}" "$@"
`;
  const node = path.join(dir, 'node');
  fs.writeFileSync(node, script, { mode: 0o755 });
  return {
    dir,
    cgroup,
    removeEmpty() {
      for (const name of fs.existsSync(cgroup) ? fs.readdirSync(cgroup) : []) {
        const child = path.join(cgroup, name);
        if (!name.startsWith('worker-') || !fs.statSync(child).isDirectory()) continue;
        try {
          fs.rmdirSync(child); // fails while a process is still in it
        } catch {}
      }
      try {
        fs.rmdirSync(cgroup);
      } catch {}
    },
  };
}
