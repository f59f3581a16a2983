import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * The package's bin from source (`npx tsx lib/cli/main.ts ...args`) as a
 * child process, as an operator runs it. `env` is laid over this process's
 * environment without its DATABASE_URL and OUTBOX_SCHEMA (an undefined value
 * leaves a variable unset).
 */
export function runCli(args: string[], env: Record<string, string | undefined>): Promise<CliRun> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
  delete childEnv.DATABASE_URL;
  delete childEnv.OUTBOX_SCHEMA;
  for (const [key, value] of Object.entries(env)) if (value !== undefined) childEnv[key] = value;
  const started = Date.now();
  return new Promise((resolve) => {
    execFile(
      'npx',
      ['tsx', 'lib/cli/main.ts', ...args],
      { cwd: ROOT, env: childEnv, timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout, stderr, ms: Date.now() - started });
      },
    );
  });
}
