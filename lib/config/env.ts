import { z } from 'zod';
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
 * Reads one variable through a zod schema. A bad value becomes a
 * {@link ConfigError} that names the variable, what was expected and what was
 * found, so a cold start fails with a message an operator can act on.
 */
export function readVar<T>(env: Env, name: string, schema: z.ZodType<T>): T {
  const raw = env[name];
  const value = raw === undefined || raw.trim() === '' ? undefined : raw.trim();
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issues = parsed.error.issues
      .map((i) => (i.path.length ? `${i.path.join('.')}: ${i.message}` : i.message))
      .join('; ');
    const shown = raw === undefined ? 'unset' : `"${raw.length > 200 ? `${raw.slice(0, 200)}…` : raw}"`;
    throw new ConfigError(name, `${issues} (got ${shown})`);
  }
  return parsed.data;
}

/** An optional integer variable within bounds. */
export const intVar = (min: number, max: number) =>
  z.coerce
    .number({ error: `expected an integer from ${min} to ${max}` })
    .int(`expected an integer from ${min} to ${max}`)
    .min(min, `expected an integer from ${min} to ${max}`)
    .max(max, `expected an integer from ${min} to ${max}`)
    .optional();

export const numberVar = (min: number, max: number) =>
  z.coerce
    .number({ error: `expected a number from ${min} to ${max}` })
    .min(min, `expected a number from ${min} to ${max}`)
    .max(max, `expected a number from ${min} to ${max}`)
    .optional();

export const boolVar = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'], { error: 'expected true or false' })
  .transform((v) => v === 'true' || v === '1' || v === 'yes')
  .optional();

/** A JSON document validated by `schema`. */
export const jsonVar = <T>(schema: z.ZodType<T>) =>
  z
    .string({ error: 'expected a JSON document' })
    .transform((text, ctx) => {
      try {
        return JSON.parse(text) as unknown;
      } catch (error) {
        ctx.addIssue({ code: 'custom', message: `not valid JSON (${(error as Error).message})` });
        return z.NEVER;
      }
    })
    .pipe(schema);
