import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

/**
 * The package's own entry points (`pg-lambda-outbox/...`, imported by
 * functions/ as a user would) resolve to the TypeScript sources under this
 * export condition instead of the built dist/ (package.json "exports"), so
 * tests need no build. The rest are Vitest's defaults: Vite's server
 * conditions without `module` (which would pick ESM builds Node cannot run).
 */
const sourceConditions = ['outbox-source', ...defaultServerConditions.filter((c) => c !== 'module')];

export default defineConfig({
  resolve: { conditions: sourceConditions },
  ssr: { resolve: { conditions: sourceConditions } },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    // Each file creates its own database and its own queues, so files run in
    // parallel; two workers match the two cores this project is sized for.
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
