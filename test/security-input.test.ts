// Bad input, bounded and kept out of output: a database secret that does
// not parse is reported by its shape, never its content.
import { inspect } from 'node:util';
import { CreateSecretCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { databaseConfig } from '../lib/db/connection-config.js';
import { uniqueName } from './support/aws.js';

const saved = { ...process.env };
afterEach(() => {
  process.env = { ...saved };
});

/** Everything a logger or an error reporter could print of an error. */
function printed(error: unknown): string {
  const e = error as Error;
  return [
    String(e),
    // The stack's first line (its frames name only files of the code).
    e.stack?.split('\n')[0],
    JSON.stringify(e),
    JSON.stringify({ message: e.message, cause: e.cause }),
    inspect(e, { depth: 10, showHidden: true }),
  ].join('\n');
}

/** Every run of `size` characters of `text`. */
const pieces = (text: string, size: number) =>
  Array.from({ length: text.length - size + 1 }, (_, i) => text.slice(i, i + size));

describe('a database secret that does not parse', () => {
  async function readSecret(value: string): Promise<unknown> {
    Object.assign(process.env, {
      AWS_ENDPOINT_URL: inject('awsEndpoint'),
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'test',
      AWS_SECRET_ACCESS_KEY: 'test',
    });
    const client = new SecretsManagerClient({});
    const { ARN } = await client.send(
      new CreateSecretCommand({ Name: uniqueName('outbox-db'), SecretString: value }),
    );
    client.destroy();
    return databaseConfig({ ...process.env, DATABASE_SECRET_ARN: ARN }).then(
      () => undefined,
      (error: unknown) => error,
    );
  }

  it('is reported by its length and what was expected, never by any part of its content', async () => {
    const password = 'h7Qx-9vWk-pLz2-RtY8';
    const secrets = [
      // Hand-written, the password unquoted: V8's message quoted about ten characters of it.
      `{"username":"u","password": ${password}}`,
      // Short enough for V8 to quote whole.
      `{"password":"${password}"`,
      `{"host":"db","username":"u","password":"${password}"}}`,
    ];
    for (const secret of secrets) {
      const error = await readSecret(secret);
      expect(error).toMatchObject({ name: 'ConfigError', variable: 'DATABASE_SECRET_ARN' });
      const text = printed(error);
      for (const piece of pieces(password, 4)) expect(text).not.toContain(piece);
      expect((error as Error).message).toBe(
        `DATABASE_SECRET_ARN: the secret is not a JSON object {host, port, username, password, dbname}: its ${secret.length} characters are not valid JSON (every string value, the password too, must be in double quotes); its content is not shown`,
      );
      expect((error as Error).cause).toBeUndefined();
    }
  });

  it('that parses but has the wrong shape names the fields and types, not the values', async () => {
    const error = await readSecret('{"host":"db","username":["h7Qx-9vWk-pLz2-RtY8"],"password":12345678}');
    expect((error as Error).message).toBe(
      'DATABASE_SECRET_ARN: the secret is not a JSON object {host, port, username, password, dbname}: username: invalid_type, expected string; password: invalid_type, expected string',
    );
    const text = printed(error);
    for (const piece of pieces('h7Qx-9vWk-pLz2-RtY8', 4)) expect(text).not.toContain(piece);
    expect(text).not.toContain('12345678');
    const notObject = await readSecret('"h7Qx-9vWk-pLz2-RtY8"');
    expect((notObject as Error).message).toMatch(/: the secret: invalid_type, expected object$/);
    expect(printed(notObject)).not.toContain('h7Qx');
  });
});
