/**
 * `npm run bench:signer`: the time to sign one direct call (lib/publish/sigv4.ts)
 * against the SDK's signer (`@smithy/signature-v4`) on the same request: a
 * SendMessageBatch of 10 messages of 400 bytes, with a session token, as a
 * relay on a Lambda role's credentials signs it. Rounds alternate; prints
 * microseconds per signature. No network, no database.
 */
import { SQSClient } from '@aws-sdk/client-sqs';
import { SignatureV4 } from '@smithy/signature-v4';
import { SigV4Signer } from '../lib/publish/sigv4.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SIGNATURES = Number(process.env.BENCH_SIGNATURES ?? 20_000);

const sha256 = new SQSClient({ region: 'eu-west-1' }).config.sha256;
const credentials = async () => ({
  accessKeyId: 'ASIAEXAMPLEEXAMPLE00',
  secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
  sessionToken: 'IQoJb3JpZ2luX2VjE'.repeat(40),
});
const sdk = new SignatureV4({ credentials, region: 'eu-west-1', service: 'sqs', sha256 });
const ours = new SigV4Signer({ credentials, region: 'eu-west-1', service: 'sqs', path: '/' });
const body = JSON.stringify({
  QueueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/outbox',
  Entries: Array.from({ length: 10 }, (_, i) => ({ Id: String(i), MessageBody: 'x'.repeat(400) })),
});
const headers = {
  host: 'sqs.eu-west-1.amazonaws.com',
  'content-type': 'application/x-amz-json-1.0',
  'x-amz-target': 'AmazonSQS.SendMessageBatch',
  'x-amz-query-mode': 'true',
  'x-amz-user-agent': 'aws-sdk-js/3.0.0',
  'user-agent': 'aws-sdk-js/3.0.0 ua/2.1 os/linux lang/js md/nodejs#22',
  'content-length': String(Buffer.byteLength(body)),
};

async function microseconds(sign: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 2_000; i++) await sign();
  const start = performance.now();
  for (let i = 0; i < SIGNATURES; i++) await sign();
  return ((performance.now() - start) / SIGNATURES) * 1000;
}

const results: { sdk: number; ours: number }[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const sdkUs = await microseconds(() =>
    sdk.sign(
      {
        method: 'POST',
        protocol: 'https:',
        hostname: headers.host,
        path: '/',
        query: {},
        headers: { ...headers },
        body,
      } as never,
      { signingDate: new Date() },
    ),
  );
  const oursUs = await microseconds(() =>
    ours.sign({ method: 'POST', path: '/', headers, body }, new Date()),
  );
  results.push({ sdk: sdkUs, ours: oursUs });
  console.log(
    `round ${round + 1}: SDK signer ${sdkUs.toFixed(1)} µs, sigv4.ts ${oursUs.toFixed(1)} µs (${(oursUs / sdkUs).toFixed(2)})`,
  );
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const s = median(results.map((r) => r.sdk));
const o = median(results.map((r) => r.ours));
console.log(
  `median: SDK signer ${s.toFixed(1)} µs, sigv4.ts ${o.toFixed(1)} µs a signature (${(o / s).toFixed(2)}); node ${process.version}`,
);
