import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../lib/errors.js';
import { importOptional, optionalImportOnce } from '../../lib/optional-dependency.js';

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

describe('optionalImportOnce', () => {
  it('loads at the first call and hands the same module to later ones', async () => {
    let loads = 0;
    const load = optionalImportOnce('pg', 'a test', () => {
      loads++;
      return import('pg');
    });
    expect(loads).toBe(0);
    const [a, b] = await Promise.all([load(), load()]);
    const c = await load();
    expect(loads).toBe(1);
    expect(a).toBe(b);
    expect(c).toBe(a);
  });

  it('keeps no failure: a missing package fails every call, a load that failed once is tried again', async () => {
    const missing = 'pg-lambda-outbox-no-such-package';
    const loadMissing = optionalImportOnce(missing, 'largePayloads', () => import(missing));
    await expect(loadMissing()).rejects.toBeInstanceOf(ConfigError);
    await expect(loadMissing()).rejects.toBeInstanceOf(ConfigError);

    let attempts = 0;
    const flaky = optionalImportOnce('pg', 'a test', () =>
      ++attempts === 1 ? Promise.reject(new Error('boom')) : import('pg'),
    );
    await expect(flaky()).rejects.toThrow('boom');
    expect((await flaky()).default.Pool).toBeTypeOf('function');
    expect(attempts).toBe(2);
  });
});
