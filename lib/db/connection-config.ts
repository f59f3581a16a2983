import fs from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import type pg from 'pg';
import { type Env, readVar } from '../config/env.js';
import { boolVar, intVar } from '../config/vars.js';
import { ConfigError } from '../errors.js';
import { importOptional } from '../optional-dependency.js';
import * as z from '../zod.js';

/**
 * TLS modes: how the connection is encrypted and what is verified (libpq's names):
 * - `verify-full`: TLS; the server certificate must chain to a trusted CA and
 *   name the host connected to.
 * - `verify-ca`: TLS; the chain is checked, the host name is not.
 * - `require`: TLS without any verification (encryption only).
 * - `disable`: no TLS.
 */
export const SSL_MODES = ['verify-full', 'verify-ca', 'require', 'disable'] as const;
export type SslMode = (typeof SSL_MODES)[number];

/**
 * RDS IAM tokens are valid for 15 minutes, and only for opening a connection.
 * Pooled connections are closed after this many seconds so that none outlives
 * the credentials (and role changes) it was opened with by much.
 */
export const IAM_AUTH_MAX_LIFETIME_SECONDS = 600;

const sslModeMessage = `expected one of ${SSL_MODES.join(', ')}`;
const sslModeVar = z.enum(SSL_MODES, { error: sslModeMessage }).optional();

const secretSchema = z.object({
  host: z.string().min(1),
  port: z.coerce.number().int().min(1).max(65535).optional(),
  username: z.string().min(1),
  // Empty or absent: the server must not ask for one (trust auth on a local
  // server) or DATABASE_IAM_AUTH=true signs a token instead.
  password: z.string().optional(),
  dbname: z.string().min(1).optional(),
  sslmode: z.string().optional(),
});

/** Where the connection points, before TLS and authentication are decided. */
interface Endpoint {
  /** Either a connection string (DATABASE_URL without IAM auth)... */
  connectionString?: string;
  /** ...or the parts. */
  host?: string;
  port?: number;
  user?: string;
  password?: string;
  database?: string;
  /** An sslmode written in the secret or the URL, and which variable it came from. */
  carriedSslMode?: { mode: SslMode; variable: string };
  /** `sslrootcert` from the URL: a CA file, used when DATABASE_SSL_CA_FILE is unset. */
  carriedCaFile?: string;
  /** TLS mode when nothing says otherwise. */
  defaultSslMode: SslMode;
}

/**
 * Connection settings from the environment, for `new pg.Pool(...)`.
 *
 * Where: `DATABASE_SECRET_ARN` (a Secrets Manager secret in the RDS format:
 * host, port, username, password, dbname, and optionally sslmode) or
 * `DATABASE_URL`.
 *
 * TLS (`DATABASE_SSL_MODE`, see {@link SslMode}): the variable wins over an
 * `sslmode` in the secret or in the URL's query string, which wins over the
 * default: `verify-full` for a secret or with IAM auth, `disable` for a URL.
 * Verification trusts `DATABASE_SSL_CA_FILE` when set (e.g. the RDS global
 * bundle), otherwise Node's default store plus `NODE_EXTRA_CA_CERTS`.
 * `DATABASE_SSL_REJECT_UNAUTHORIZED=false` is the deprecated way to say
 * `require`.
 *
 * `DATABASE_IAM_AUTH=true`: the password is an RDS IAM token signed (region
 * `AWS_REGION`, default credential chain) for each new connection, TLS is
 * mandatory and connections are recycled after
 * {@link IAM_AUTH_MAX_LIFETIME_SECONDS}.
 *
 * A bad or missing value throws a {@link ConfigError} naming the variable.
 */
export async function databaseConfig(env: Env = process.env): Promise<pg.PoolConfig> {
  const base: pg.PoolConfig = {
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 60_000,
    // A statement stuck behind a lock must not outlive the invocation.
    statement_timeout: 30_000,
    application_name: env.AWS_LAMBDA_FUNCTION_NAME ?? 'pg-lambda-outbox',
  };
  const iamAuth = readVar(env, 'DATABASE_IAM_AUTH', boolVar) ?? false;
  const secretArn = env.DATABASE_SECRET_ARN?.trim();
  const url = env.DATABASE_URL?.trim();
  let endpoint: Endpoint;
  if (secretArn) {
    const timeoutMs = readVar(env, 'DATABASE_SECRET_TIMEOUT_MS', intVar(100, 120_000)) ?? SECRET_TIMEOUT_MS;
    endpoint = await endpointFromSecret(secretArn, timeoutMs);
  } else if (url) endpoint = endpointFromUrl(url, iamAuth);
  else throw new ConfigError('DATABASE_URL', 'set DATABASE_URL (local) or DATABASE_SECRET_ARN (AWS)');

  const sslMode = resolveSslMode(env, endpoint);
  const config: pg.PoolConfig = { ...base, ssl: sslOptions(env, sslMode, endpoint.carriedCaFile) };
  if (endpoint.connectionString !== undefined) config.connectionString = endpoint.connectionString;
  if (endpoint.host !== undefined) config.host = endpoint.host;
  if (endpoint.port !== undefined) config.port = endpoint.port;
  if (endpoint.user !== undefined) config.user = endpoint.user;
  if (endpoint.database !== undefined) config.database = endpoint.database;
  if (endpoint.password) config.password = endpoint.password;

  if (iamAuth) {
    if (sslMode === 'disable') {
      throw new ConfigError(
        'DATABASE_IAM_AUTH',
        `RDS IAM authentication needs TLS, but the TLS mode is disable (${sslModeOrigin(env, endpoint)}); use verify-full, verify-ca or require`,
      );
    }
    const region = readVar(
      env,
      'AWS_REGION',
      z.string({ error: 'the region of the database is needed to sign RDS IAM tokens' }),
    );
    const { host, port, user } = endpoint;
    if (!host || !user) {
      throw new ConfigError('DATABASE_URL', 'RDS IAM authentication needs a host name and a user name');
    }
    const { Signer } = await importOptional(
      '@aws-sdk/rds-signer',
      'DATABASE_IAM_AUTH',
      () => import('@aws-sdk/rds-signer'),
    );
    const signer = new Signer({ hostname: host, port: port ?? 5432, username: user, region });
    // pg calls this whenever the server asks for a password, i.e. once per
    // new connection, so each connection signs a fresh token. A token is only
    // checked when a connection opens; maxLifetimeSeconds bounds how long an
    // open connection lives on after it.
    config.password = () => signer.getAuthToken();
    config.maxLifetimeSeconds = IAM_AUTH_MAX_LIFETIME_SECONDS;
  }
  return config;
}

/**
 * How long reading the database secret may take, retries included (default
 * of `DATABASE_SECRET_TIMEOUT_MS`). It runs at cold start, before the
 * invocation's own deadline is known: without a bound, a Secrets Manager
 * endpoint that accepts connections and never answers would hold the
 * invocation until the function times out.
 */
export const SECRET_TIMEOUT_MS = 10_000;

async function endpointFromSecret(secretArn: string, timeoutMs: number): Promise<Endpoint> {
  // Loaded only when a secret is used: a DATABASE_URL needs no AWS SDK.
  const { GetSecretValueCommand, SecretsManagerClient } = await importOptional(
    '@aws-sdk/client-secrets-manager',
    'DATABASE_SECRET_ARN',
    () => import('@aws-sdk/client-secrets-manager'),
  );
  // Each attempt bounded by the request handler, all of them by the signal.
  const client = new SecretsManagerClient({
    maxAttempts: 3,
    requestHandler: {
      connectionTimeout: Math.min(3_000, timeoutMs),
      requestTimeout: timeoutMs,
      throwOnRequestTimeout: true,
    },
  });
  const deadline = AbortSignal.timeout(timeoutMs);
  let text: string | undefined;
  try {
    const value = await client.send(new GetSecretValueCommand({ SecretId: secretArn }), {
      abortSignal: deadline,
    });
    text = value.SecretString;
  } catch (error) {
    const reason = deadline.aborted
      ? `Secrets Manager did not answer within ${timeoutMs} ms (DATABASE_SECRET_TIMEOUT_MS)`
      : (error as Error).message;
    throw new ConfigError(
      'DATABASE_SECRET_ARN',
      `could not read a {host, port, username, password, dbname} secret: ${reason}`,
      { cause: error },
    );
  } finally {
    client.destroy();
  }
  const secret = parseSecret(text);
  const endpoint: Endpoint = {
    host: secret.host,
    port: secret.port ?? 5432,
    user: secret.username,
    database: secret.dbname ?? 'postgres',
    defaultSslMode: 'verify-full',
  };
  if (secret.password) endpoint.password = secret.password;
  if (secret.sslmode !== undefined) {
    endpoint.carriedSslMode = {
      mode: carriedMode('DATABASE_SECRET_ARN', secret.sslmode),
      variable: 'DATABASE_SECRET_ARN',
    };
  }
  return endpoint;
}

const SECRET_SHAPE = 'a JSON object {host, port, username, password, dbname}';

/**
 * The secret's fields. A secret that is not what is expected is described
 * by its shape (its length, which fields are missing or of the wrong type),
 * never by its content: JSON.parse's message quotes the text around the
 * error, which in a hand-written secret is the password, and these errors
 * reach the function's log. No `cause` either (loggers print it).
 */
function parseSecret(text: string | undefined): z.infer<typeof secretSchema> {
  const fail = (reason: string) =>
    new ConfigError('DATABASE_SECRET_ARN', `the secret is not ${SECRET_SHAPE}: ${reason}`);
  if (text === undefined) throw fail('it has no SecretString (a binary secret?)');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw fail(
      `its ${text.length} characters are not valid JSON (every string value, the password too, must be in double quotes); its content is not shown`,
    );
  }
  const parsed = secretSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((issue) => {
      const where = issue.path.length > 0 ? issue.path.map(String).join('.') : 'the secret';
      const expected =
        'expected' in issue && typeof issue.expected === 'string' ? `, expected ${issue.expected}` : '';
      return `${where}: ${issue.code}${expected}`;
    });
    throw fail(issues.join('; '));
  }
  return parsed.data;
}

/**
 * Checks that a connection string is one pg reads as such: a
 * `postgres://` or `postgresql://` URL, `socket:/path`, or a socket
 * directory (`/var/run/postgresql`). pg reads anything else as a path under
 * a host named "base" (`DATABASE_URL=not-a-url` fails with `getaddrinfo
 * ENOTFOUND base`), so it is refused here, naming the variable and never
 * showing the value (it may hold a password).
 */
export function checkConnectionString(raw: string, variable: string): void {
  if (/^(postgres(ql)?:\/\/|socket:|\/)/i.test(raw)) return;
  const keywords = /^\s*\w+\s*=/.test(raw)
    ? '; libpq keyword=value strings (host=... dbname=...) are not supported'
    : '';
  throw new ConfigError(
    variable,
    `is not a PostgreSQL connection URL: expected postgres://user:password@host:5432/database${keywords} (the value is not shown: it may hold a password)`,
  );
}

/** Query parameters about TLS that are taken out of the URL and decided here. */
const TLS_PARAMS = ['sslmode', 'ssl', 'sslrootcert', 'uselibpqcompat'];
const CLIENT_CERT_PARAMS = ['sslcert', 'sslkey', 'sslpassword'];

/**
 * Reads the TLS parameters out of a connection string. Without IAM auth the
 * rest of the string goes to pg unchanged (sockets, `options`, ...); pg would
 * otherwise apply its own reading of `sslmode` on top of ours. With IAM auth
 * the URL is taken apart, because pg lets a connection string's (empty)
 * password override a password function.
 */
function endpointFromUrl(raw: string, iamAuth: boolean): Endpoint {
  const defaultSslMode: SslMode = iamAuth ? 'verify-full' : 'disable';
  checkConnectionString(raw, 'DATABASE_URL');
  let url: URL | undefined;
  if (/^postgres(ql)?:\/\//i.test(raw)) {
    try {
      url = new URL(raw);
    } catch {
      url = undefined;
    }
  }
  if (!url) {
    if (iamAuth) {
      throw new ConfigError(
        'DATABASE_URL',
        'expected a postgres://user@host:port/database URL for RDS IAM auth',
      );
    }
    if (/[?&](sslmode|ssl|sslrootcert|sslcert|sslkey)=/i.test(raw)) {
      throw new ConfigError('DATABASE_URL', 'could not parse the URL to read its TLS parameters');
    }
    return { connectionString: raw, defaultSslMode };
  }
  const params = url.searchParams;
  const clientCert = CLIENT_CERT_PARAMS.filter((name) => params.has(name));
  if (clientCert.length > 0) {
    throw new ConfigError('DATABASE_URL', `client certificates (${clientCert.join(', ')}) are not supported`);
  }
  const endpoint: Endpoint = { defaultSslMode };
  const sslmode = params.get('sslmode') ?? legacySslParam(params.get('ssl'));
  if (sslmode !== null) {
    endpoint.carriedSslMode = { mode: carriedMode('DATABASE_URL', sslmode), variable: 'DATABASE_URL' };
  }
  const rootCert = params.get('sslrootcert');
  // libpq's sslrootcert=system means the default store: the same as no file.
  if (rootCert && rootCert !== 'system') endpoint.carriedCaFile = rootCert;
  const hadTlsParams = TLS_PARAMS.some((name) => params.has(name));
  for (const name of TLS_PARAMS) params.delete(name);

  if (!iamAuth) {
    // Untouched when there was nothing to take out.
    endpoint.connectionString = hadTlsParams ? url.toString() : raw;
    return endpoint;
  }
  const extra = [...params.keys()];
  if (extra.length > 0) {
    throw new ConfigError(
      'DATABASE_URL',
      `parameters ${extra.join(', ')} are not supported with DATABASE_IAM_AUTH=true; use postgres://user@host:port/database`,
    );
  }
  if (url.password) {
    throw new ConfigError(
      'DATABASE_URL',
      'carries a password, but DATABASE_IAM_AUTH=true signs a token instead; remove the password',
    );
  }
  endpoint.host = decodeURIComponent(url.hostname.replace(/^\[(.+)\]$/, '$1'));
  endpoint.port = url.port ? Number(url.port) : 5432;
  endpoint.user = decodeURIComponent(url.username);
  const database = decodeURIComponent(url.pathname.slice(1));
  if (database) endpoint.database = database;
  return endpoint;
}

/** pg's own `ssl=true|1|0|false|no-verify` query parameter, as an sslmode. */
function legacySslParam(value: string | null): string | null {
  if (value === null) return null;
  if (value === 'true' || value === '1') return 'verify-full';
  if (value === 'false' || value === '0') return 'disable';
  if (value === 'no-verify') return 'require';
  return value;
}

function carriedMode(variable: string, value: string): SslMode {
  if ((SSL_MODES as readonly string[]).includes(value)) return value as SslMode;
  const hint =
    value === 'prefer' || value === 'allow'
      ? '; node-postgres cannot fall back between TLS and plain connections, so say require or disable'
      : '';
  throw new ConfigError(variable, `sslmode: ${sslModeMessage} (got "${value}")${hint}`);
}

function resolveSslMode(env: Env, endpoint: Endpoint): SslMode {
  const explicit = readVar(env, 'DATABASE_SSL_MODE', sslModeVar);
  // Deprecated: `false` meant "encrypt but do not verify", i.e. require.
  const rejectUnauthorized = readVar(env, 'DATABASE_SSL_REJECT_UNAUTHORIZED', boolVar);
  const verifies = (mode: SslMode) => mode === 'verify-full' || mode === 'verify-ca';
  if (explicit !== undefined) {
    if (
      (rejectUnauthorized === false && verifies(explicit)) ||
      (rejectUnauthorized === true && explicit === 'require')
    ) {
      throw new ConfigError(
        'DATABASE_SSL_REJECT_UNAUTHORIZED',
        `deprecated, and contradicts DATABASE_SSL_MODE=${explicit}; remove it`,
      );
    }
    return explicit;
  }
  const mode = endpoint.carriedSslMode?.mode ?? endpoint.defaultSslMode;
  // It only ever turned verification off; it never turned TLS on.
  if (rejectUnauthorized === false && verifies(mode)) return 'require';
  return mode;
}

function sslModeOrigin(env: Env, endpoint: Endpoint): string {
  if (env.DATABASE_SSL_MODE?.trim()) return 'from DATABASE_SSL_MODE';
  if (endpoint.carriedSslMode) return `sslmode in ${endpoint.carriedSslMode.variable}`;
  return 'the default';
}

function sslOptions(env: Env, mode: SslMode, carriedCaFile: string | undefined): false | ConnectionOptions {
  if (mode === 'disable') return false;
  if (mode === 'require') return { rejectUnauthorized: false };
  const options: ConnectionOptions = { rejectUnauthorized: true };
  const envCaFile = env.DATABASE_SSL_CA_FILE?.trim();
  if (envCaFile) options.ca = readCaFile('DATABASE_SSL_CA_FILE', envCaFile);
  else if (carriedCaFile) options.ca = readCaFile('DATABASE_URL', carriedCaFile);
  // verify-ca: the chain is verified by TLS (rejectUnauthorized); only the
  // comparison of the certificate's names with the host is skipped.
  if (mode === 'verify-ca') options.checkServerIdentity = () => undefined;
  return options;
}

function readCaFile(variable: string, file: string): string {
  let pem: string;
  try {
    pem = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new ConfigError(variable, `cannot read the CA file ${file}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) {
    throw new ConfigError(variable, `${file} holds no PEM certificate`);
  }
  return pem;
}
