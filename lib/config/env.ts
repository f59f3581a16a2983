import type { StandardSchemaV1 } from '../contracts/standard-schema.js';
import { validateSchemaName } from '../db/schema.js';
import { ConfigError } from '../errors.js';

export type Env = Record<string, string | undefined>;

/**
 * `OUTBOX_SCHEMA`: the schema of the outbox tables (`migrate({ schema })`).
 * Unset or empty: unqualified names, found through the connection's
 * `search_path` (the default, as before the option existed).
 */
export function schemaVar(env: Env): string | undefined {
  const value = env.OUTBOX_SCHEMA;
  return value === undefined || value === '' ? undefined : validateSchemaName(value, 'OUTBOX_SCHEMA');
}

/**
 * Reads one variable through a schema (any Standard Schema validator: zod,
 * valibot, ...; synchronous). A bad value becomes a {@link ConfigError} that
 * names the variable, what was expected and what was found, so a cold start
 * fails with a message an operator can act on.
 */
export function readVar<T>(env: Env, name: string, schema: StandardSchemaV1<unknown, T>): T {
  const raw = env[name];
  const value = raw === undefined || raw.trim() === '' ? undefined : raw.trim();
  const result = schema['~standard'].validate(value);
  if (result instanceof Promise)
    throw new ConfigError(name, 'the schema validates asynchronously; readVar needs a synchronous one');
  if (result.issues) {
    const issues = result.issues
      .map((i) => {
        const path = (i.path ?? []).map((s) => String(typeof s === 'object' ? s.key : s));
        return path.length ? `${path.join('.')}: ${i.message}` : i.message;
      })
      .join('; ');
    const shown = raw === undefined ? 'unset' : `"${raw.length > 200 ? `${raw.slice(0, 200)}…` : raw}"`;
    throw new ConfigError(name, `${issues} (got ${shown})`);
  }
  return result.value;
}
