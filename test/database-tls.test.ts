import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { promisify } from 'node:util';
import { CreateSecretCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Env } from '../lib/config/env.js';
import { databaseConfig, IAM_AUTH_MAX_LIFETIME_SECONDS } from '../lib/db/connection-config.js';
import { uniqueName } from './support/aws.js';
import { PASSWORD_ROLE, startTlsPostgres, type TlsPostgres } from './support/tls-postgres.js';

// A PostgreSQL of its own with TLS on, a CA of its own, and a pg_hba.conf that
// refuses unencrypted TCP connections (test/support/tls-postgres.ts).
let server: TlsPostgres;
const ROLE_PASSWORD = 'local-password';

beforeAll(async () => {
  server = await startTlsPostgres();
  const admin = new pg.Client({ ...target(), ssl: { rejectUnauthorized: false } });
  await admin.connect();
  await admin.query(`CREATE ROLE ${PASSWORD_ROLE} LOGIN PASSWORD '${ROLE_PASSWORD}'`);
  await admin.end();
});
afterAll(async () => {
  await server?.stop();
});

const saved = { ...process.env };
afterEach(() => {
  process.env = { ...saved };
});

function target(host = '127.0.0.1', user = server.user) {
  return { host, port: server.port, user, database: 'postgres' };
}

function url(host = '127.0.0.1', user = server.user, query = ''): string {
  return `postgres://${user}@${host}:${server.port}/postgres${query}`;
}

/** Connects with what databaseConfig(env) returned; true when the session is encrypted. */
async function connectsWithTls(env: Env): Promise<boolean> {
  const client = new pg.Client(await databaseConfig(env));
  await client.connect();
  try {
    const { rows } = await client.query<{ ssl: boolean }>(
      'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()',
    );
    return rows[0]?.ssl as boolean;
  } finally {
    await client.end();
  }
}

// Node's codes for "the chain does not lead to a trusted CA".
const untrusted = {
  code: expect.stringMatching(/^(UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT)/),
};
const wrongName = { code: 'ERR_TLS_CERT_ALTNAME_INVALID' };

/** The SDK clients (and the RDS signer's credentials) find the emulator through the environment. */
function useEmulator() {
  Object.assign(process.env, {
    AWS_ENDPOINT_URL: inject('awsEndpoint'),
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
  });
}

async function createSecret(value: Record<string, unknown>): Promise<string> {
  const created = await new SecretsManagerClient({}).send(
    new CreateSecretCommand({ Name: uniqueName('outbox-db-tls'), SecretString: JSON.stringify(value) }),
  );
  return created.ARN as string;
}

describe('DATABASE_SSL_MODE against a TLS server', () => {
  it('verify-full with the CA that signed the server certificate connects, encrypted', async () => {
    expect(
      await connectsWithTls({
        DATABASE_URL: url(),
        DATABASE_SSL_MODE: 'verify-full',
        DATABASE_SSL_CA_FILE: server.caFile,
      }),
    ).toBe(true);
  });

  it('verify-full fails with a certificate error when trusting another CA, or only the default store', async () => {
    await expect(
      connectsWithTls({
        DATABASE_URL: url(),
        DATABASE_SSL_MODE: 'verify-full',
        DATABASE_SSL_CA_FILE: server.otherCaFile,
      }),
    ).rejects.toMatchObject(untrusted);
    // No file: Node's own store (and NODE_EXTRA_CA_CERTS, unset here) knows nothing of this CA.
    await expect(
      connectsWithTls({ DATABASE_URL: url(), DATABASE_SSL_MODE: 'verify-full' }),
    ).rejects.toMatchObject(untrusted);
  });

  it('a host name the certificate does not carry: verify-full fails, verify-ca passes, verify-ca still checks the chain', async (ctx) => {
    const host = server.unnamedHost;
    if (!host) return ctx.skip('127.0.0.2 is not routed to the loopback interface here');
    const env = { DATABASE_URL: url(host), DATABASE_SSL_CA_FILE: server.caFile };
    await expect(connectsWithTls({ ...env, DATABASE_SSL_MODE: 'verify-full' })).rejects.toMatchObject(
      wrongName,
    );
    expect(await connectsWithTls({ ...env, DATABASE_SSL_MODE: 'verify-ca' })).toBe(true);
    await expect(
      connectsWithTls({ ...env, DATABASE_SSL_MODE: 'verify-ca', DATABASE_SSL_CA_FILE: server.otherCaFile }),
    ).rejects.toMatchObject(untrusted);
  });

  it('require encrypts without any CA; so does the deprecated DATABASE_SSL_REJECT_UNAUTHORIZED=false', async () => {
    expect(await connectsWithTls({ DATABASE_URL: url(), DATABASE_SSL_MODE: 'require' })).toBe(true);
    expect(
      await connectsWithTls({
        DATABASE_URL: url('127.0.0.1', server.user, '?sslmode=verify-full'),
        DATABASE_SSL_REJECT_UNAUTHORIZED: 'false',
      }),
    ).toBe(true);
  });

  it('disable: this server only accepts TLS (hostssl), so the plain connection is refused', async () => {
    await expect(connectsWithTls({ DATABASE_URL: url(), DATABASE_SSL_MODE: 'disable' })).rejects.toThrow(
      /pg_hba\.conf rejects connection .* no encryption/,
    );
    // The default for a URL without sslmode is disable, as before.
    await expect(connectsWithTls({ DATABASE_URL: url() })).rejects.toThrow(/no encryption/);
  });

  it("the URL's sslmode and sslrootcert are honoured, and DATABASE_SSL_MODE wins over them", async (ctx) => {
    const host = server.unnamedHost;
    if (!host) return ctx.skip('127.0.0.2 is not routed to the loopback interface here');
    const withQuery = url(
      host,
      server.user,
      `?sslmode=verify-ca&sslrootcert=${encodeURIComponent(server.caFile)}`,
    );
    expect(await connectsWithTls({ DATABASE_URL: withQuery })).toBe(true);
    await expect(
      connectsWithTls({ DATABASE_URL: withQuery, DATABASE_SSL_MODE: 'verify-full' }),
    ).rejects.toMatchObject(wrongName);
  });

  it('NODE_EXTRA_CA_CERTS is trusted when DATABASE_SSL_CA_FILE is unset (as in Lambda)', async () => {
    // Node reads NODE_EXTRA_CA_CERTS once at start-up: only a new process shows it.
    const script = [
      "import pg from 'pg';",
      "import { databaseConfig } from './lib/db/connection-config.ts';",
      'const client = new pg.Client(await databaseConfig());',
      'await client.connect();',
      "const { rows } = await client.query('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');",
      'console.log(JSON.stringify(rows[0]));',
      'await client.end();',
    ].join('\n');
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script],
      {
        cwd: process.cwd(),
        env: {
          PATH: process.env.PATH,
          NODE_EXTRA_CA_CERTS: server.caFile,
          DATABASE_URL: url(),
          DATABASE_SSL_MODE: 'verify-full',
        },
      },
    );
    expect(JSON.parse(stdout.trim())).toEqual({ ssl: true });
  });
});

describe('the secret path against a TLS server', () => {
  it("a secret's sslmode applies (and needs no password with trust auth); DATABASE_SSL_MODE overrides it", async () => {
    useEmulator();
    const { host, port, user, database } = target();
    const verifyCa = await createSecret({
      host,
      port,
      username: user,
      dbname: database,
      sslmode: 'verify-ca',
    });
    expect(
      await connectsWithTls({
        ...process.env,
        DATABASE_SECRET_ARN: verifyCa,
        DATABASE_SSL_CA_FILE: server.caFile,
      }),
    ).toBe(true);

    const disabled = await createSecret({
      host,
      port,
      username: user,
      password: '',
      dbname: database,
      sslmode: 'disable',
    });
    await expect(connectsWithTls({ ...process.env, DATABASE_SECRET_ARN: disabled })).rejects.toThrow(
      /no encryption/,
    );
    expect(
      await connectsWithTls({ ...process.env, DATABASE_SECRET_ARN: disabled, DATABASE_SSL_MODE: 'require' }),
    ).toBe(true);
  });

  it('without sslmode a secret means verify-full: the default store alone does not trust this server', async () => {
    useEmulator();
    const { host, port, user, database } = target();
    const arn = await createSecret({ host, port, username: user, dbname: database });
    await expect(connectsWithTls({ ...process.env, DATABASE_SECRET_ARN: arn })).rejects.toMatchObject(
      untrusted,
    );
    expect(
      await connectsWithTls({
        ...process.env,
        DATABASE_SECRET_ARN: arn,
        DATABASE_SSL_CA_FILE: server.caFile,
      }),
    ).toBe(true);
  });
});

/**
 * Ends a pool and waits until its connections are closed: pool.end() resolves
 * earlier, and a connection still closing when the server stops would raise
 * an uncaught error.
 */
async function endPool(pool: pg.Pool): Promise<void> {
  let open = pool.totalCount;
  const closed = new Promise<void>((resolve) => {
    if (open === 0) resolve();
    pool.on('remove', () => {
      if (--open === 0) resolve();
    });
  });
  await pool.end();
  await closed;
}

/** The parts of an RDS IAM token: a presigned `host:port/?Action=connect&...` request. */
function decodeToken(token: string) {
  const parsed = new URL(`https://${token}`);
  return { host: parsed.hostname, port: Number(parsed.port), query: Object.fromEntries(parsed.searchParams) };
}

function expectTokenFor(token: string, user: string, region: string) {
  expect(decodeToken(token)).toEqual({
    host: '127.0.0.1',
    port: server.port,
    query: expect.objectContaining({
      Action: 'connect',
      DBUser: user,
      'X-Amz-Algorithm': 'AWS4-HMAC-SHA256',
      'X-Amz-Credential': expect.stringMatching(new RegExp(`^test/\\d{8}/${region}/rds-db/aws4_request$`)),
      'X-Amz-Expires': '900',
      'X-Amz-SignedHeaders': 'host',
      'X-Amz-Signature': expect.stringMatching(/^[0-9a-f]{64}$/),
    }),
  });
}

describe('DATABASE_IAM_AUTH against a TLS server', () => {
  // The tokens cannot be checked by a local PostgreSQL (only RDS and RDS Proxy
  // can), so these tests prove what is sent and when, not that RDS accepts it.

  it('the server asking for a password gets a token signed for that host, port and user', async () => {
    useEmulator();
    const config = await databaseConfig({
      ...process.env,
      AWS_REGION: 'eu-west-1',
      DATABASE_URL: url('127.0.0.1', PASSWORD_ROLE),
      DATABASE_IAM_AUTH: 'true',
      DATABASE_SSL_CA_FILE: server.caFile,
    });
    expect(config.maxLifetimeSeconds).toBe(IAM_AUTH_MAX_LIFETIME_SECONDS);
    expect(IAM_AUTH_MAX_LIFETIME_SECONDS).toBeLessThan(15 * 60);
    const sign = config.password as () => Promise<string>;
    const tokens: string[] = [];
    const client = new pg.Client({
      ...config,
      password: async () => {
        const token = await sign();
        tokens.push(token);
        return token;
      },
    });
    // PostgreSQL compares the token with the role's password: RDS would check the signature.
    await expect(client.connect()).rejects.toMatchObject({
      code: '28P01',
      message: `password authentication failed for user "${PASSWORD_ROLE}"`,
    });
    expect(tokens).toHaveLength(1);
    expectTokenFor(tokens[0] as string, PASSWORD_ROLE, 'eu-west-1');
  });

  it('from a secret (no password in it): one token per new connection, none for a reused one, a new one after maxLifetimeSeconds', async () => {
    useEmulator();
    const { host, port } = target();
    const arn = await createSecret({ host, port, username: PASSWORD_ROLE, dbname: 'postgres' });
    const config = await databaseConfig({
      ...process.env,
      DATABASE_SECRET_ARN: arn,
      DATABASE_IAM_AUTH: 'true',
      DATABASE_SSL_CA_FILE: server.caFile,
    });
    const sign = config.password as () => Promise<string>;
    const tokens: string[] = [];
    // Each call signs a real token; the local server is then given the role's
    // password, which it can check, so the connection opens.
    const password = async () => {
      tokens.push(await sign());
      return ROLE_PASSWORD;
    };
    const pool = new pg.Pool({ ...config, password, max: 2 });
    try {
      const first = await pool.connect();
      const second = await pool.connect();
      expect(tokens).toHaveLength(2);
      const { rows } = await first.query<{ ssl: boolean }>(
        'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()',
      );
      expect(rows[0]?.ssl).toBe(true);
      first.release();
      second.release();
      (await pool.connect()).release();
      expect(tokens).toHaveLength(2);
      for (const token of tokens) expectTokenFor(token, PASSWORD_ROLE, 'us-east-1');
    } finally {
      await endPool(pool);
    }

    // The same with a one-second lifetime: the expired idle connection is
    // closed, and the next one signs a new token.
    const shortLived = new pg.Pool({ ...config, password, max: 1, maxLifetimeSeconds: 1 });
    try {
      tokens.length = 0;
      (await shortLived.connect()).release();
      await once(shortLived, 'remove');
      (await shortLived.connect()).release();
      expect(tokens).toHaveLength(2);
    } finally {
      await endPool(shortLived);
    }
  });
});
