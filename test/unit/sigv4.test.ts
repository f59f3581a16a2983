import { SQSClient } from '@aws-sdk/client-sqs';
import { SignatureV4 } from '@smithy/signature-v4';
import { describe, expect, it } from 'vitest';
import { type Credentials, type SdkSigner, SigV4Signer, signsLikeSdk } from '../../lib/publish/sigv4.js';

/**
 * The direct calls' signer (lib/publish/sigv4.ts) against the SDK's own
 * (`@smithy/signature-v4`): the same headers, byte for byte, for the
 * requests direct calls sign, and for awkward ones.
 */

/** A deterministic stream of numbers: a failing case can be replayed. */
function random(seed: number) {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

const NAMES = [
  'Content-Type',
  'content-type',
  'X-Amz-Target',
  'x-amz-user-agent',
  'User-Agent',
  'host',
  'Host',
  'x-amzn-trace-id',
  'proxy-authorization',
  'Sec-Fetch-Mode',
  'x-amz-query-mode',
  'amz-sdk-request',
  'Date',
  'Authorization',
  'x-custom',
];
const VALUES = [
  'application/x-amz-json-1.0',
  'AmazonSQS.SendMessageBatch',
  '  padded value  ',
  'tabs\tand  spaces',
  'line\r\nbreak',
  'aws-sdk-js/3.0.0 ua/2.1 os/linux#6 lang/js md/nodejs#20',
  'sqs.eu-west-1.amazonaws.com',
  '',
  ' ',
  'ünïcödé',
];
const BODIES = [
  '',
  '{}',
  '{"QueueUrl":"https://sqs/1/q","Entries":[]}',
  '{"note":"ünïcödé ✓ 🚀"}',
  'x'.repeat(5000),
];
const PATHS = ['/', '/2012-11-05/queues', '/a/./b/../c/', '/with space/and+plus', "/it's(*)!"];

/** The hash an SQS client signs with, as direct calls give it to the SDK's signer. */
const Sha256 = new SQSClient({ region: 'eu-west-1' }).config.sha256;

function credentialsOf(next: () => number, i: number): Credentials {
  const token = next() < 0.5 ? `token-${i}-${'t'.repeat(Math.floor(next() * 40))}` : undefined;
  return {
    accessKeyId: `AKIA${i % 3}`,
    secretAccessKey: `secret-${i % 4}/${'s'.repeat(i % 5)}+`,
    ...(token ? { sessionToken: token } : {}),
  };
}

describe('the direct calls’ SigV4 signer', () => {
  it('signs as the SDK signer does, header for header, over 2,000 varied requests', async () => {
    const next = random(20261203);
    const pick = <T>(list: readonly T[]) => list[Math.floor(next() * list.length)] as T;
    for (const path of PATHS) {
      for (const service of ['sqs', 'events']) {
        const region = pick(['eu-west-1', 'us-east-1']);
        // One signer per kept request, as direct calls make them; credentials rotate under it.
        let credentials = credentialsOf(next, 0);
        const provider = async () => credentials;
        const ours = new SigV4Signer({ credentials: provider, region, service, path });
        const sdk = new SignatureV4({ credentials: provider, region, service, sha256: Sha256 });
        for (let i = 0; i < 200; i++) {
          if (next() < 0.1) credentials = credentialsOf(next, i);
          const headers: Record<string, string> = {};
          const count = 1 + Math.floor(next() * 6);
          for (let h = 0; h < count; h++) headers[pick(NAMES)] = pick(VALUES);
          const body = pick(BODIES);
          headers['content-length'] = String(Buffer.byteLength(body));
          // Dates across days, months and years: the day's signing key changes under the cache.
          const signingDate = new Date(
            Date.UTC(2026, 11, 31, 23, 59, 50) + Math.floor(next() * 40_000) - 20_000,
          );
          const expected = await sdk.sign(
            {
              method: 'POST',
              protocol: 'https:',
              hostname: 'h',
              path,
              query: {},
              headers: { ...headers },
              body,
            },
            { signingDate },
          );
          const actual = await ours.sign({ method: 'POST', path, headers, body }, signingDate);
          expect(
            actual,
            JSON.stringify({ path, service, headers, body: body.slice(0, 40), signingDate }),
          ).toEqual(expected.headers);
        }
      }
    }
  });

  it('leaves the request it signs as it was', async () => {
    const ours = new SigV4Signer({
      credentials: async () => ({ accessKeyId: 'AKIA', secretAccessKey: 's', sessionToken: 't' }),
      region: 'eu-west-1',
      service: 'sqs',
      path: '/',
    });
    const headers = { 'content-type': 'application/x-amz-json-1.0', date: 'x' };
    const signed = await ours.sign({ method: 'POST', path: '/', headers, body: '{}' }, new Date());
    expect(headers).toEqual({ 'content-type': 'application/x-amz-json-1.0', date: 'x' });
    expect(signed.date).toBeUndefined();
    expect(signed['x-amz-security-token']).toBe('t');
  });

  it('refuses credentials without a key, as the SDK signer does', async () => {
    const ours = new SigV4Signer({
      credentials: async () => ({}) as Credentials,
      region: 'eu-west-1',
      service: 'sqs',
      path: '/',
    });
    await expect(ours.sign({ method: 'POST', path: '/', headers: {}, body: '' }, new Date())).rejects.toThrow(
      /credential/,
    );
  });

  it('the check before use sees a signer that signs differently', async () => {
    const credentials = async () => ({ accessKeyId: 'AKIA', secretAccessKey: 'secret' });
    const sdk = new SignatureV4({
      credentials,
      region: 'eu-west-1',
      service: 'sqs',
      sha256: Sha256,
    }) as unknown as SdkSigner;
    const request = {
      method: 'POST',
      protocol: 'https:',
      hostname: 'sqs.eu-west-1.amazonaws.com',
      path: '/',
      headers: { host: 'sqs.eu-west-1.amazonaws.com', 'content-length': '2' },
      body: '{}',
    };
    const date = new Date();
    const same = new SigV4Signer({ credentials, region: 'eu-west-1', service: 'sqs', path: '/' });
    const otherRegion = new SigV4Signer({ credentials, region: 'eu-west-2', service: 'sqs', path: '/' });
    const otherPath = new SigV4Signer({ credentials, region: 'eu-west-1', service: 'sqs', path: '/q' });
    expect(await signsLikeSdk(same, sdk, request, date)).toBe(true);
    expect(await signsLikeSdk(otherRegion, sdk, request, date)).toBe(false);
    expect(await signsLikeSdk(otherPath, sdk, request, date)).toBe(false);
  });
});
