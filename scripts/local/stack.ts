import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import { CloudWatchLogsClient, FilterLogEventsCommand } from '@aws-sdk/client-cloudwatch-logs';
import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import {
  CreateSecretCommand,
  PutSecretValueCommand,
  ResourceExistsException,
  SecretsManagerClient,
} from '@aws-sdk/client-secrets-manager';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const SERVICE = 'pg-lambda-outbox';

/** A stage param's default in serverless.yml (`params.default`), as written there. */
export function stageParamDefault(name: string): string {
  const yml = fs.readFileSync(`${ROOT}/serverless.yml`, 'utf8');
  const block = /^params:\n {2}default:\n((?: {4}.*\n|\s*\n)+)/m.exec(yml)?.[1] ?? '';
  const value = new RegExp(`^ {4}${name}: *(?:'([^']*)'|([^'#\\s](?:[^#\\n]*[^#\\s])?))`, 'm').exec(block);
  if (!value) throw new Error(`serverless.yml has no default for the stage param ${name}`);
  return (value[1] ?? value[2]) as string;
}

/** The emulator's test credentials: the deployer's, not a function's. */
export function emulatorClientConfig(endpoint: string) {
  return {
    endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  };
}

/** What `serverless deploy` created, as the stack's outputs name it. */
export interface DeployedStack {
  stage: string;
  endpoint: string;
  secretArn: string;
  outputs: Record<string, string>;
  functionName(name: 'relay' | 'consumer' | 'redrive' | 'cleanup'): string;
  roleName(name: 'relay' | 'consumer' | 'redrive' | 'cleanup'): string;
}

/**
 * Writes the database secret the deployed functions read (RDS format, in the
 * emulator's Secrets Manager), named so the stage's default IAM pattern
 * `pg-lambda-outbox-<stage>-*` matches it too. Idempotent.
 */
export async function putDatabaseSecret(
  endpoint: string,
  stage: string,
  databaseUrl: string,
): Promise<string> {
  const url = new URL(databaseUrl);
  const value = JSON.stringify({
    engine: 'postgres',
    host: url.hostname,
    port: Number(url.port || 5432),
    username: decodeURIComponent(url.username || 'postgres'),
    password: decodeURIComponent(url.password),
    dbname: decodeURIComponent(url.pathname.slice(1)),
  });
  const client = new SecretsManagerClient(emulatorClientConfig(endpoint));
  const name = `${SERVICE}-${stage}-database`;
  try {
    return (await client.send(new CreateSecretCommand({ Name: name, SecretString: value }))).ARN as string;
  } catch (error) {
    if (!(error instanceof ResourceExistsException)) throw error;
    return (await client.send(new PutSecretValueCommand({ SecretId: name, SecretString: value })))
      .ARN as string;
  }
}

/** Runs the serverless CLI (osls) against the emulator; rejects with its output's tail. */
export function serverless(
  endpoint: string,
  args: string[],
  options: { log?: (line: string) => void; env?: Record<string, string> } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('npx', ['serverless', ...args], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        AWS_ENDPOINT_URL: endpoint,
        AWS_REGION: 'us-east-1',
        AWS_ACCESS_KEY_ID: 'test',
        AWS_SECRET_ACCESS_KEY: 'test',
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
        SLS_TELEMETRY_DISABLED: '1',
        SLS_NOTIFICATIONS_MODE: 'off',
        ...options.env,
      },
    });
    let output = '';
    const collect = (chunk: Buffer) => {
      output += chunk.toString();
      for (const line of chunk.toString().split('\n')) if (line.trim()) options.log?.(line);
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) resolve(output);
      else reject(new Error(`serverless ${args.join(' ')} exited with ${code}:\n${output.slice(-3000)}`));
    });
  });
}

/**
 * `serverless deploy --stage <stage>` of serverless.yml as it is, into the
 * emulator at `endpoint`, with the database secret for `databaseUrl`.
 */
export async function deployStack(options: {
  endpoint: string;
  databaseUrl: string;
  stage?: string;
  params?: Record<string, string>;
  log?: (line: string) => void;
}): Promise<DeployedStack> {
  const stage = options.stage ?? 'local';
  const { endpoint } = options;
  const secretArn = await putDatabaseSecret(endpoint, stage, options.databaseUrl);
  const params = { databaseSecretArn: secretArn, ...options.params };
  // Packaged into a folder of the stage's own, so a packaging elsewhere
  // (`serverless package`, the bundle test) cannot race with this one.
  const packageDir = `.local/stack-${stage}/package`;
  const paramArgs = Object.entries(params).map(([k, v]) => `--param=${k}=${v}`);
  const env = { OUTBOX_ESBUILD_DIR: `.local/stack-${stage}/esbuild` };
  await serverless(endpoint, ['package', '--stage', stage, '--package', packageDir, ...paramArgs], {
    log: options.log,
    env,
  });
  await serverless(endpoint, ['deploy', '--stage', stage, '--package', packageDir, ...paramArgs], {
    log: options.log,
    env,
  });
  const cloudFormation = new CloudFormationClient(emulatorClientConfig(endpoint));
  const { Stacks } = await cloudFormation.send(
    new DescribeStacksCommand({ StackName: `${SERVICE}-${stage}` }),
  );
  const outputs = Object.fromEntries(
    (Stacks?.[0]?.Outputs ?? []).map((o) => [o.OutputKey as string, o.OutputValue as string]),
  );
  return {
    stage,
    endpoint,
    secretArn,
    outputs,
    functionName: (name) => `${SERVICE}-${stage}-${name}`,
    roleName: (name) => `${SERVICE}-${stage}-us-east-1-${name}`,
  };
}

/** Invokes a deployed function. `Event`: asynchronously, as a schedule does. */
export async function invokeFunction(
  stack: DeployedStack,
  name: 'relay' | 'consumer' | 'redrive' | 'cleanup',
  payload: unknown,
  type: 'Event' | 'RequestResponse' = 'RequestResponse',
): Promise<{ statusCode?: number; functionError?: string; payload: unknown }> {
  const lambda = new LambdaClient({ ...emulatorClientConfig(stack.endpoint), maxAttempts: 1 });
  const response = await lambda.send(
    new InvokeCommand({
      FunctionName: stack.functionName(name),
      InvocationType: type,
      Payload: Buffer.from(JSON.stringify(payload)),
    }),
  );
  const text = response.Payload ? Buffer.from(response.Payload).toString() : '';
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: keep the text
  }
  return { statusCode: response.StatusCode, functionError: response.FunctionError, payload: parsed };
}

/** The JSON log lines (Powertools) among `lines`. */
export function jsonLines(lines: readonly string[]): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const line of lines) {
    const start = line.indexOf('{');
    if (start < 0) continue;
    try {
      out.push(JSON.parse(line.slice(start)));
    } catch {
      // not a JSON line
    }
  }
  return out;
}

/**
 * Follows one deployed function's log group in the emulator's CloudWatch
 * Logs: each `poll()` returns the lines not seen before.
 */
export class LogTail {
  private readonly logs: CloudWatchLogsClient;
  private readonly seen = new Set<string>();
  private since: number;

  constructor(
    private readonly stack: DeployedStack,
    private readonly name: 'relay' | 'consumer' | 'redrive' | 'cleanup',
    since: number,
  ) {
    this.logs = new CloudWatchLogsClient(emulatorClientConfig(stack.endpoint));
    this.since = since;
  }

  async poll(): Promise<string[]> {
    return (await this.pollEvents()).map((event) => event.message);
  }

  /** As poll, with each line's timestamp (ms since the epoch; in MiniStack, when the invocation ended). */
  async pollEvents(): Promise<{ message: string; timestamp: number }[]> {
    const fresh: { message: string; timestamp: number }[] = [];
    let nextToken: string | undefined;
    let newest = this.since;
    try {
      do {
        const page = await this.logs.send(
          new FilterLogEventsCommand({
            logGroupName: `/aws/lambda/${this.stack.functionName(this.name)}`,
            startTime: this.since,
            nextToken,
          }),
        );
        for (const event of page.events ?? []) {
          const id = event.eventId ?? `${event.timestamp}:${event.logStreamName}:${event.message}`;
          if (this.seen.has(id)) continue;
          this.seen.add(id);
          newest = Math.max(newest, event.timestamp ?? 0);
          if (event.message) fresh.push({ message: event.message, timestamp: event.timestamp ?? 0 });
        }
        nextToken = page.nextToken;
      } while (nextToken);
    } catch (error) {
      if ((error as Error).name === 'ResourceNotFoundException') return [];
      throw error;
    }
    // Lines of the same millisecond may still arrive: keep a 2 s overlap,
    // which the seen-set dedupes, and forget ids older than that.
    this.since = Math.max(this.since, newest - 2_000);
    return fresh;
  }
}
