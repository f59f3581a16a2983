import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../lib/errors.js';
import { importOptional } from '../../lib/optional-dependency.js';

describe('importOptional', () => {
  it('returns the module when the package is installed', async () => {
    const pg = await importOptional('pg', 'a test', () => import('pg'));
    expect(pg.default.Pool).toBeTypeOf('function');
  });

  it('names the package and the feature when the package is missing', async () => {
    const missing = 'pg-lambda-outbox-no-such-package';
    const error = await importOptional(missing, 'largePayloads', () => import(missing)).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).variable).toBe('largePayloads');
    expect((error as ConfigError).message).toBe(
      `largePayloads: ${missing} is not installed: npm i ${missing}`,
    );
  });

  it('lets any other load failure through unchanged', async () => {
    const broken = new Error('boom');
    await expect(importOptional('pg', 'a test', () => Promise.reject(broken))).rejects.toBe(broken);
  });
});
