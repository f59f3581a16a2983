// README.md, "Deploying": what serverless.yml deploys, read as osls resolves
// it for a stage (`serverless print`, offline, no AWS): "the four functions
// (relay on `rate(1 minute)`, consumer on the consumer queue with
// `ReportBatchItemFailures`, redrive for operators, cleanup hourly), the
// standard, FIFO and dead-letter queues, the event bus and the rule routing
// order events to the consumer queue, a least-privilege IAM role per
// function, ... alarms and a dashboard", and "`--schema <name>` with the
// stage param `outboxSchema`".
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));

interface Resource {
  Type: string;
  Condition?: string;
  Properties?: Record<string, unknown>;
}
interface Printed {
  functions: Record<string, { role?: string; events?: Array<Record<string, Record<string, unknown>>> }>;
  provider: { environment: Record<string, unknown> };
  resources: { Resources: Record<string, Resource> };
}

/** serverless.yml as osls resolves it for `stage`, with `params` given as --param. */
async function printed(stage: string, params: Record<string, string> = {}): Promise<Printed> {
  const { stdout } = await promisify(execFile)(
    path.join(root, 'node_modules/.bin/serverless'),
    [
      'print',
      '--format',
      'json',
      '--stage',
      stage,
      ...Object.entries(params).map(([k, v]) => `--param=${k}=${v}`),
    ],
    {
      cwd: root,
      env: { ...process.env, SLS_TELEMETRY_DISABLED: '1', SLS_NOTIFICATIONS_MODE: 'off' },
      maxBuffer: 16 * 1024 * 1024,
    },
  );
  return JSON.parse(stdout) as Printed;
}

/** A schedule's `rate(n unit)` in seconds. */
function rateSeconds(rate: unknown): number {
  const m = /^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$/.exec(String(rate));
  if (!m) throw new Error(`not a rate expression: ${String(rate)}`);
  const unit = { minute: 60, minutes: 60, hour: 3600, hours: 3600, day: 86400, days: 86400 }[
    m[2] as 'minute'
  ];
  return Number(m[1]) * unit;
}

const getAtt = (value: unknown) => (value as { 'Fn::GetAtt'?: [string, string] })?.['Fn::GetAtt']?.[0];

describe('README: what serverless.yml deploys', () => {
  it('four functions on their triggers, the queues, the bus and its rule, a role each, alarms and a dashboard', async () => {
    const [dev, prod, inSchema, noWindow] = await Promise.all([
      printed('dev'),
      printed('prod'),
      printed('dev', { outboxSchema: 'billing' }),
      printed('dev', { consumerBatchingWindow: '0' }),
    ]);
    for (const [stage, config] of [
      ['dev', dev],
      ['prod', prod],
    ] as const) {
      const { functions } = config;
      const resources = config.resources.Resources;
      expect(Object.keys(functions).sort(), stage).toEqual(['cleanup', 'consumer', 'redrive', 'relay']);

      // The relay every minute, cleanup every hour, both on a schedule.
      const schedule = (fn: string) => functions[fn]?.events?.map((e) => e.schedule?.rate);
      expect(schedule('relay'), stage).toEqual([['rate(1 minute)']]);
      const cleanup = schedule('cleanup');
      expect(cleanup?.length, stage).toBe(1);
      expect(rateSeconds((cleanup?.[0] as string[] | undefined)?.[0]), stage).toBe(3600);
      // Redrive is for operators: no trigger.
      expect(functions.redrive?.events ?? [], stage).toEqual([]);

      // The consumer on the consumer queue, reporting partial batch failures.
      const [trigger, ...others] = functions.consumer?.events ?? [];
      expect(others, stage).toEqual([]);
      expect(getAtt(trigger?.sqs?.arn), stage).toBe('ConsumerQueue');
      expect(trigger?.sqs?.functionResponseType, stage).toBe('ReportBatchItemFailures');
      // Batches of 10, waiting up to consumerBatchingWindow (1 s) to fill.
      expect(trigger?.sqs, stage).toMatchObject({ batchSize: 10, maximumBatchingWindow: 1 });

      // The standard and the FIFO queue, each with its dead-letter queue; the
      // consumer queue with its own.
      const queue = (name: string) => {
        const resource = resources[name];
        expect(resource?.Type, `${stage} ${name}`).toBe('AWS::SQS::Queue');
        return resource?.Properties ?? {};
      };
      const dlqOf = (name: string) =>
        getAtt((queue(name).RedrivePolicy as { deadLetterTargetArn?: unknown })?.deadLetterTargetArn);
      expect(queue('OutboxQueue').FifoQueue, stage).toBeUndefined();
      expect(queue('OutboxFifoQueue').FifoQueue, stage).toBe(true);
      for (const name of ['OutboxQueue', 'OutboxFifoQueue', 'ConsumerQueue']) {
        const dlq = dlqOf(name);
        expect(dlq, `${stage} ${name}`).toBeDefined();
        expect(queue(dlq as string).FifoQueue, `${stage} ${dlq}`).toBe(queue(name).FifoQueue);
      }

      // The bus, and the rule sending its order events to the consumer queue.
      expect(resources.OutboxBus?.Type, stage).toBe('AWS::Events::EventBus');
      const rules = Object.values(resources).filter((r) => r.Type === 'AWS::Events::Rule');
      const rule = rules.find(
        (r) => (r.Properties?.EventBusName as { Ref?: string } | undefined)?.Ref === 'OutboxBus',
      );
      const ruleProperties = (rule?.Properties ?? {}) as {
        EventPattern?: Record<string, unknown>;
        Targets?: Array<{ Arn: unknown }>;
      };
      expect(ruleProperties.EventPattern?.['detail-type'], stage).toEqual([{ prefix: 'order.' }]);
      expect(
        (ruleProperties.Targets ?? []).map((t) => getAtt(t.Arn)),
        stage,
      ).toContain('ConsumerQueue');

      // A role of its own per function.
      const roles = Object.values(functions).map((f) => f.role as string);
      expect(new Set(roles).size, stage).toBe(4);
      for (const role of roles) expect(resources[role]?.Type, `${stage} ${role}`).toBe('AWS::IAM::Role');

      // Alarms (not all behind a condition) and a dashboard.
      const alarms = Object.values(resources).filter((r) => r.Type === 'AWS::CloudWatch::Alarm');
      expect(alarms.filter((a) => a.Condition === undefined).length, stage).toBeGreaterThan(0);
      expect(
        Object.values(resources).filter((r) => r.Type === 'AWS::CloudWatch::Dashboard').length,
        stage,
      ).toBe(1);
    }

    // The stage param outboxSchema becomes every function's OUTBOX_SCHEMA.
    expect(dev.provider.environment.OUTBOX_SCHEMA).toBe('');
    expect(inSchema.provider.environment.OUTBOX_SCHEMA).toBe('billing');
    expect(noWindow.functions.consumer?.events?.[0]?.sqs?.maximumBatchingWindow).toBe(0);
  }, 90_000);
});

describe('docs/deploy.md: the stage params', () => {
  it('has a row for every param serverless.yml takes', () => {
    const yml = fs.readFileSync(path.join(root, 'serverless.yml'), 'utf8');
    const defaults = yml.slice(yml.indexOf('params:\n  default:\n')).split('\n').slice(2);
    const params: string[] = [];
    for (const line of defaults) {
      if (/^ {0,2}\S/.test(line)) break;
      const name = /^ {4}(\w+):/.exec(line)?.[1];
      if (name) params.push(name);
    }
    expect(params.length).toBeGreaterThan(30);
    const docs = fs.readFileSync(path.join(root, 'docs/deploy.md'), 'utf8');
    const rows = new Set(
      [...docs.matchAll(/^\| ([^|]+) \|/gm)].flatMap((m) =>
        [...(m[1] ?? '').matchAll(/`(\w+)`/g)].map((n) => n[1]),
      ),
    );
    expect(params.filter((p) => !rows.has(p))).toEqual([]);
  });
});
