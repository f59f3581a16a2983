// Bad input, bounded and kept out of output: a database secret that does
// not parse is reported by its shape, never its content; the consumer reads
// no payload larger than its memory holds.
import { randomUUID } from 'node:crypto';
import { inspect } from 'node:util';
import { CreateSecretCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { SQSRecord } from 'aws-lambda';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { createConsumer } from '../lib/consumer/consumer.js';
import { payloadBytesForMemory } from '../lib/consumer/options.js';
import { databaseConfig } from '../lib/db/connection-config.js';
import { uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';

const db = useTestDatabase();

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

describe("the consumer's payload limit", () => {
  const MIB = 1024 * 1024;

  it('is derived from the function memory, as the relay sizes its claims: 1 MiB to 10 MiB', () => {
    expect(payloadBytesForMemory(undefined)).toBe(10 * MIB);
    expect(payloadBytesForMemory(128)).toBe(MIB);
    expect(payloadBytesForMemory(256)).toBe(Math.floor((128 * MIB) / 24));
    expect(payloadBytesForMemory(368)).toBe(10 * MIB);
    expect(payloadBytesForMemory(10_240)).toBe(10 * MIB);
  });

  /** A record whose payload the relay stored in S3, `bytes` long by its pointer. */
  function storedPayloadRecord(bytes: number) {
    const id = randomUUID();
    const body = JSON.stringify({
      id,
      type: 'order.created',
      aggregateType: 'order',
      aggregateId: 'o-1',
      occurredAt: new Date().toISOString(),
      headers: {},
      payloadRef: { s3: { bucket: 'payloads-bucket', key: `payloads/${id}` }, bytes, sha256: 'a'.repeat(64) },
    });
    const record: SQSRecord = {
      messageId: randomUUID(),
      receiptHandle: 'handle',
      body,
      attributes: {
        ApproximateReceiveCount: '1',
        SentTimestamp: String(Date.now()),
        SenderId: 'AIDAEXAMPLE',
        ApproximateFirstReceiveTimestamp: String(Date.now()),
      },
      messageAttributes: {},
      md5OfBody: '',
      eventSource: 'aws:sqs',
      eventSourceARN: 'arn:aws:sqs:us-east-1:123456789012:orders',
      awsRegion: 'us-east-1',
    };
    return record;
  }

  async function fetches(env: Record<string, string>, bytes: number, maxBytes?: number) {
    Object.assign(process.env, env);
    const calls: string[] = [];
    const s3 = {
      send: async (command: object) => {
        calls.push(command.constructor.name);
        throw Object.assign(new Error('no such key'), { name: 'NoSuchKey' });
      },
    };
    const consumer = createConsumer({
      name: uniqueName('limit'),
      pool: db.pool,
      handlers: {},
      fallback: async () => {},
      largePayloads: { bucket: 'payloads-bucket', s3: s3 as never, ...(maxBytes ? { maxBytes } : {}) },
    });
    const result = await consumer.handleSqsEvent({ Records: [storedPayloadRecord(bytes)] });
    expect(result.failed).toBe(1);
    return { fetched: calls.length > 0, reason: result.outcomes[0]?.error?.message };
  }

  it('refuses, without fetching it, a payload larger than a 256 MB function holds; more memory or an explicit maxBytes reads it', async () => {
    const six = 6 * MIB;
    const small = await fetches({ AWS_LAMBDA_FUNCTION_MEMORY_SIZE: '256' }, six);
    expect(small.fetched).toBe(false);
    expect(small.reason).toMatch(/over the consumer's largePayloads\.maxBytes \(5592405\): not fetched/);
    expect((await fetches({ AWS_LAMBDA_FUNCTION_MEMORY_SIZE: '512' }, six)).fetched).toBe(true);
    expect((await fetches({ AWS_LAMBDA_FUNCTION_MEMORY_SIZE: '256' }, six, 7 * MIB)).fetched).toBe(true);
    await expect(fetches({ AWS_LAMBDA_FUNCTION_MEMORY_SIZE: 'lots' }, six)).rejects.toMatchObject({
      name: 'ConfigError',
      variable: 'AWS_LAMBDA_FUNCTION_MEMORY_SIZE',
    });
  });
});
