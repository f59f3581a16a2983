import { CreateSecretCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { databaseConfig } from '../functions/shared/database.js';
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

describe('databaseConfig', () => {
  it('reads an RDS-format secret from Secrets Manager, with TLS on', async () => {
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
    expect(config.connectionString).toBeUndefined();
  });

  it('a secret that is not in the expected format fails with the variable named', async () => {
    useEmulator();
    const arn = await createSecret(JSON.stringify({ host: 'db.internal' }));
    await expect(databaseConfig({ ...process.env, DATABASE_SECRET_ARN: arn })).rejects.toMatchObject({
      name: 'ConfigError',
      variable: 'DATABASE_SECRET_ARN',
    });
  });

  it('uses DATABASE_URL locally, and names both variables when neither is set', async () => {
    expect(await databaseConfig({ DATABASE_URL: 'postgres://u@h:5432/d' })).toMatchObject({
      connectionString: 'postgres://u@h:5432/d',
    });
    await expect(databaseConfig({})).rejects.toThrow(/DATABASE_URL.*DATABASE_SECRET_ARN/);
  });
});
