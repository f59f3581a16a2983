import path from 'node:path';
import type { BuildOptions } from 'esbuild';

/**
 * bench/db-cost-child.ts bundled the way serverless-esbuild bundles the
 * Lambda (one ESM file, packages inside), for the benchmarks that run the
 * relay in a child process (bench/db-cost.ts, bench/cpu-ab.ts). `root` is
 * the tree whose child is bundled.
 */
export function relayChildBuild(root: string): BuildOptions {
  return {
    entryPoints: [path.join(root, 'bench/db-cost-child.ts')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    logLevel: 'error',
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
  };
}

/** The deployed relay's settings (serverless.yml: OUTBOX_BATCH_SIZE, OUTBOX_WORKERS, OUTBOX_CONCURRENCY). */
export const DEPLOYED_RELAY = { relay: { batchSize: 100, workers: 2, safetyMarginMs: 0 }, concurrency: 16 };
