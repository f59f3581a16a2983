// readVar (pg-lambda-outbox/lambda) reads one environment variable through
// the caller's own schema: any synchronous Standard Schema validator, so a
// service's zod or valibot works without the package installing either.
import * as v from 'valibot';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { readVar } from '../../lib/lambda/index.js';

describe('readVar', () => {
  it("returns the value a service's zod schema parsed (trimmed; empty reads as unset)", () => {
    expect(readVar({ PORT: ' 8080 ' }, 'PORT', z.coerce.number().int())).toBe(8080);
    expect(readVar({ NAME: '' }, 'NAME', z.string().default('relay'))).toBe('relay');
  });

  it('names the variable, the path, the message and what was found', () => {
    const schema = z
      .string()
      .transform((s) => JSON.parse(s) as unknown)
      .pipe(z.object({ url: z.url() }));
    expect(() => readVar({ TARGET: '{"url":"nope"}' }, 'TARGET', schema)).toThrow(
      /^TARGET: url: Invalid URL \(got "\{"url":"nope"\}"\)$/,
    );
    expect(() => readVar({}, 'PORT', z.coerce.number().int().min(1))).toThrow(/^PORT: .* \(got unset\)$/);
  });

  it('takes valibot as well', () => {
    const schema = v.pipe(v.string(), v.transform(Number), v.number(), v.maxValue(10, 'at most 10'));
    expect(readVar({ N: '7' }, 'N', schema)).toBe(7);
    expect(() => readVar({ N: '70' }, 'N', schema)).toThrow(/^N: at most 10 \(got "70"\)$/);
  });

  it('refuses a schema that validates asynchronously, naming the variable', () => {
    const schema = z.string().refine(async () => true);
    expect(() => readVar({ X: 'a' }, 'X', schema)).toThrow(/^X: .*synchronous/);
  });
});
