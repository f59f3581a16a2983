import * as z from '../zod.js';

/**
 * The zod schemas of this package's own environment variables, read with
 * readVar (env.ts). Kept apart from env.ts, whose types are public.
 */

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
