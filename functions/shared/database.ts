import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type pg from 'pg';
import { z } from 'zod';
import { boolVar, type Env, readVar } from '../../lib/config/env.js';
import { ConfigError } from '../../lib/errors.js';

const secretSchema = z.object({
  host: z.string().min(1),
  port: z.coerce.number().int().optional(),
  username: z.string().min(1),
  password: z.string().min(1),
  dbname: z.string().min(1).optional(),
});

/**
 * Connection settings from the environment: `DATABASE_SECRET_ARN` (a Secrets
 * Manager secret in the RDS format: host, port, username, password, dbname) in
 * AWS, or `DATABASE_URL` for local runs. TLS is on for secrets; set
 * `NODE_EXTRA_CA_CERTS` to the RDS CA bundle, or `DATABASE_SSL_REJECT_UNAUTHORIZED=false`
 * to skip verification (not recommended).
 */
export async function databaseConfig(env: Env = process.env): Promise<pg.PoolConfig> {
  const base: pg.PoolConfig = {
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 60_000,
    // A statement stuck behind a lock must not outlive the invocation.
    statement_timeout: 30_000,
    application_name: env.AWS_LAMBDA_FUNCTION_NAME ?? 'pg-lambda-outbox',
  };
  const secretArn = env.DATABASE_SECRET_ARN?.trim();
  if (secretArn) {
    const client = new SecretsManagerClient({});
    let secret: z.infer<typeof secretSchema>;
    try {
      const value = await client.send(new GetSecretValueCommand({ SecretId: secretArn }));
      secret = secretSchema.parse(JSON.parse(value.SecretString ?? ''));
    } catch (error) {
      throw new ConfigError(
        'DATABASE_SECRET_ARN',
        `could not read a {host, port, username, password, dbname} secret: ${(error as Error).message}`,
        { cause: error },
      );
    }
    const rejectUnauthorized = readVar(env, 'DATABASE_SSL_REJECT_UNAUTHORIZED', boolVar) ?? true;
    return {
      ...base,
      host: secret.host,
      port: secret.port ?? 5432,
      user: secret.username,
      password: secret.password,
      database: secret.dbname ?? 'postgres',
      ssl: { rejectUnauthorized },
    };
  }
  const url = env.DATABASE_URL?.trim();
  if (!url) throw new ConfigError('DATABASE_URL', 'set DATABASE_URL (local) or DATABASE_SECRET_ARN (AWS)');
  return { ...base, connectionString: url };
}
