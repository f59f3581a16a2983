import { vi } from 'vitest';

const original = { ...process.env };

/**
 * Prepares a Lambda cold start: forgets every imported module (so the handler
 * module reads its configuration again) and replaces the environment with the
 * test run's own plus `env`. Variables set to `undefined` are removed. The
 * caller then imports the handler module.
 */
export function coldStartEnv(env: Record<string, string | undefined>): void {
  vi.resetModules();
  const next: Record<string, string | undefined> = { ...original, ...env };
  for (const [key, value] of Object.entries(next)) if (value === undefined) delete next[key];
  process.env = next as NodeJS.ProcessEnv;
}

/** Puts the environment back as it was before the first cold start. */
export function restoreEnv(): void {
  process.env = { ...original };
}

/**
 * Collects what Powertools writes (logs, and EMF metric blobs when metrics
 * are enabled): one JSON object per line on stdout or stderr. Undo with
 * `vi.restoreAllMocks()`.
 */
export function capturePowertoolsOutput(): Array<Record<string, unknown>> {
  const lines: Array<Record<string, unknown>> = [];
  const collect = (chunk: string | Uint8Array) => {
    for (const line of String(chunk).split('\n')) {
      if (line.startsWith('{')) lines.push(JSON.parse(line));
    }
    return true;
  };
  vi.spyOn(process.stdout, 'write').mockImplementation(collect);
  vi.spyOn(process.stderr, 'write').mockImplementation(collect);
  return lines;
}
