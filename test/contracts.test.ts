// Event contracts at run time, against PostgreSQL and the emulator: a bad
// payload is refused at enqueue with its path and nothing is written; events
// written through a contract reach a consumer whose handlers are declared
// against the same contracts; a payload that breaks its contract (written
// around it) fails its record alone; versions; the published JSON Schema and
// AsyncAPI document, the latter validated by the AsyncAPI parser.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Parser } from '@asyncapi/parser';
import { toStandardJsonSchema } from '@valibot/to-json-schema';
import * as v from 'valibot';
import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createConsumer } from '../lib/consumer/consumer.js';
import { ContractViolationError, defineEvents, VERSION_HEADER } from '../lib/contracts/define.js';
import { asyncApiDocument, jsonSchemas } from '../lib/contracts/publish.js';
import { withTransaction } from '../lib/db/transaction.js';
import { ConfigError, ValidationError } from '../lib/errors.js';
import { enqueueEvent } from '../lib/outbox/enqueue.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();
const root = fileURLToPath(new URL('..', import.meta.url));

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, processed_events');
});

const OrderCreatedV1 = z.object({ orderId: z.uuid(), total: z.number() });
const OrderCreated = z.object({
  orderId: z.uuid(),
  totalCents: z.int().nonnegative(),
  customer: z.object({ email: z.email() }),
  note: z.string().optional(),
});
const events = defineEvents({
  'order.created': {
    schema: OrderCreated,
    version: 2,
    previous: { 1: OrderCreatedV1 },
    aggregateType: 'order',
    description: 'An order was placed.',
  },
  // valibot, with the Standard JSON Schema extension for publishing.
  'order.cancelled': toStandardJsonSchema(
    v.object({ orderId: v.pipe(v.string(), v.uuid()), reason: v.optional(v.string()) }),
  ),
});

const orderId = () => crypto.randomUUID();
const good = (id = orderId()) => ({ orderId: id, totalCents: 4200, customer: { email: 'a@example.com' } });

async function rows() {
  const { rows } = await db.pool.query(
    'SELECT event_type, aggregate_type, payload, headers FROM outbox_events ORDER BY seq',
  );
  return rows;
}

describe('writing through a contract', () => {
  it('writes a valid event with its version; refuses a bad one naming the type and path, writing nothing', async () => {
    const id = orderId();
    await withTransaction(db.pool, async (client) => {
      await events.enqueue(client, 'order.created', { aggregateId: id, payload: good(id) });
    });
    expect(await rows()).toEqual([
      {
        event_type: 'order.created',
        aggregate_type: 'order',
        payload: good(id),
        headers: { [VERSION_HEADER]: '2' },
      },
    ]);

    const bad = { ...good(), customer: { email: 'not an address' } };
    const error = await events
      .enqueue(db.pool, 'order.created', { aggregateId: 'o-2', payload: bad })
      .catch((e) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect(error.field).toBe('payload.customer.email');
    expect(error.message).toMatch(/^payload\.customer\.email: order\.created v2: /);

    // valibot: the same rules; the contract names no aggregate type, so the producer must.
    const noType = await events
      .enqueue(db.pool, 'order.cancelled', { aggregateId: id, payload: { orderId: id } })
      .catch((e) => e);
    expect(noType).toMatchObject({ name: 'ValidationError', field: 'aggregateType' });
    const badUuid = await events
      .enqueue(db.pool, 'order.cancelled', {
        aggregateId: id,
        aggregateType: 'order',
        payload: { orderId: 'x' },
      })
      .catch((e) => e);
    expect(badUuid).toMatchObject({ name: 'ValidationError', field: 'payload.orderId' });
    expect(badUuid.message).toMatch(/order\.cancelled v1: .*(UUID|uuid)/);
    // A type without a contract, from untyped code.
    const unknown = await events
      .enqueue(db.pool, 'order.shipped' as never, { aggregateId: id, payload: {} as never })
      .catch((e) => e);
    expect(unknown).toMatchObject({ name: 'ValidationError', field: 'type' });
    expect(await rows()).toHaveLength(1);
  });

  it('enqueueMany checks every event first: one bad event, nothing written, its index in the field', async () => {
    const id = orderId();
    const error = await events
      .enqueueMany(db.pool, [
        { type: 'order.created', aggregateId: id, payload: good(id) },
        { type: 'order.created', aggregateId: id, payload: { ...good(id), totalCents: -1 } },
      ])
      .catch((e) => e);
    expect(error).toMatchObject({ name: 'ValidationError', field: 'events[1].payload.totalCents' });
    expect(await rows()).toEqual([]);
    expect(
      await events.enqueueMany(db.pool, [
        { type: 'order.created', aggregateId: id, payload: good(id) },
        { type: 'order.cancelled', aggregateId: id, aggregateType: 'order', payload: { orderId: id } },
      ]),
    ).toHaveLength(2);
  });

  it('checks the payload as the JSON the consumer receives: transforms run at the consumer, a Date is refused with a hint', async () => {
    const shaped = defineEvents({
      'price.set': z.object({ cents: z.string().transform(Number), at: z.iso.datetime() }),
      'clock.ticked': z.object({ at: z.date() }),
    });
    const id = orderId();
    // validate() needs no aggregate type and returns the schema's output.
    expect(await shaped.validate('price.set', { cents: '12', at: '2026-12-01T10:00:00Z' })).toEqual({
      cents: 12,
      at: '2026-12-01T10:00:00Z',
    });
    await shaped.enqueue(db.pool, 'price.set', {
      aggregateId: id,
      aggregateType: 'price',
      payload: { cents: '12', at: '2026-12-01T10:00:00Z' },
    });
    // Stored as given: the consumer's handler runs the same schema and gets { cents: 12 }.
    expect((await rows()).at(-1)?.payload).toEqual({ cents: '12', at: '2026-12-01T10:00:00Z' });
    const handled: unknown[] = [];
    const [handler] = Object.values(
      shaped.handlers({ 'price.set': (event) => void handled.push(event.payload) }),
    );
    await handler?.(
      {
        id: crypto.randomUUID(),
        type: 'price.set',
        aggregateType: 'price',
        aggregateId: id,
        occurredAt: new Date().toISOString(),
        payload: (await rows()).at(-1)?.payload,
        headers: { [VERSION_HEADER]: '1' },
      },
      undefined as never,
      undefined as never,
    );
    expect(handled).toEqual([{ cents: 12, at: '2026-12-01T10:00:00Z' }]);

    const dated = await shaped
      .enqueue(db.pool, 'clock.ticked', {
        aggregateId: id,
        aggregateType: 'clock',
        payload: { at: new Date() },
      })
      .catch((e) => e);
    expect(dated).toMatchObject({ name: 'ValidationError', field: 'payload.at' });
    expect(dated.message).toMatch(/valid as given but not as the JSON the consumer receives/);
    expect((await rows()).filter((r) => r.event_type === 'clock.ticked')).toEqual([]);
  });

  it('refuses a definition that is not one, naming the event type', () => {
    expect(() => defineEvents({ 'a.b': { type: 'object' } as never })).toThrow(ConfigError);
    expect(() => defineEvents({ 'a.b': { schema: OrderCreated, version: 0 } })).toThrow(
      /events\.a\.b\.version/,
    );
    expect(() =>
      defineEvents({ 'a.b': { schema: OrderCreated, version: 2, previous: { 3: OrderCreatedV1 } } }),
    ).toThrow(/events\.a\.b\.previous\.3: expected an earlier version than 2/);
  });
});

describe('consuming through the same contracts', () => {
  it('delivers checked, typed payloads of each version; a payload that breaks its contract fails its record alone', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('contracts'));
    const id = orderId();
    await events.enqueue(db.pool, 'order.created', { aggregateId: id, payload: good(id) });
    // Written around the contracts: an older producer (version 1, no header) and a broken one.
    await enqueueEvent(db.pool, {
      aggregateType: 'order',
      aggregateId: id,
      eventType: 'order.created',
      payload: { orderId: id, total: 42 },
    });
    await enqueueEvent(db.pool, {
      aggregateType: 'order',
      aggregateId: id,
      eventType: 'order.created',
      payload: { orderId: id, totalCents: 'lots' },
      headers: { [VERSION_HEADER]: '2' },
    });
    await enqueueEvent(db.pool, {
      aggregateType: 'order',
      aggregateId: id,
      eventType: 'order.created',
      payload: good(id),
      headers: { [VERSION_HEADER]: '7' },
    });
    const { relay } = emulatorRelay(db.pool, aws, [
      { match: 'order.*', targets: [{ type: 'sqs', queueUrl: queue.url }] },
    ]);
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 4 });

    const seen: Array<{ version: number; payload: unknown }> = [];
    const consumer = createConsumer({
      name: 'contracts',
      pool: db.pool,
      handlers: events.handlers({
        'order.created': async (event) => {
          if (event.version === 2) seen.push({ version: 2, payload: event.payload.customer.email });
          else seen.push({ version: 1, payload: event.payload.total });
        },
      }),
    });
    const messages = await drainQueue(aws.sqs, queue.url, 4);
    const result = await consumer.handleMessages(messages, { queueArn: queue.arn });
    expect(result).toMatchObject({ processed: 2, failed: 2 });
    expect(seen.sort((a, b) => a.version - b.version)).toEqual([
      { version: 1, payload: 42 },
      { version: 2, payload: 'a@example.com' },
    ]);
    const failures = result.outcomes.filter((o) => o.status === 'failed').map((o) => o.error);
    expect(failures.every((e) => e instanceof ContractViolationError && !e.retryable)).toBe(true);
    expect(failures.map((e) => e?.message).sort()).toEqual([
      expect.stringMatching(/^order\.created v2: payload\.totalCents: /),
      'order.created: headers.event-version: version "7" is not one this consumer accepts (1, 2)',
    ]);
    // Neither failed record left a dedupe row: the queue redelivers them, then its DLQ takes them.
    const { rows: dedupe } = await db.pool.query('SELECT count(*)::int AS n FROM processed_events');
    expect(dedupe[0].n).toBe(2);
  });

  it('refuses handlers for event types without a contract', () => {
    expect(() => events.handlers({ 'order.shipped': async () => {} } as never)).toThrow(
      /handlers\.order\.shipped/,
    );
  });
});

describe('published contracts', () => {
  it('JSON Schema per event type and version, from zod and valibot', () => {
    const schemas = jsonSchemas(events);
    expect(Object.keys(schemas)).toEqual(['order.created.v1', 'order.created.v2', 'order.cancelled.v1']);
    expect(schemas['order.created.v2']).toMatchObject({
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      required: expect.arrayContaining(['orderId', 'totalCents', 'customer']),
    });
    expect(schemas['order.cancelled.v1']).toMatchObject({ type: 'object', required: ['orderId'] });
    // A library without the JSON Schema extension needs jsonSchema in the contract.
    const plain = defineEvents({ 'x.y': v.object({ a: v.string() }) });
    expect(() => jsonSchemas(plain)).toThrow(
      /events\.x\.y: version 1: its schema \(valibot\) gives no JSON Schema/,
    );
    const given = defineEvents({
      'x.y': { schema: v.object({ a: v.string() }), jsonSchema: { type: 'object' } },
    });
    expect(jsonSchemas(given)).toEqual({ 'x.y.v1': { type: 'object' } });
  });

  it('an AsyncAPI 3 document of the queues and the bus that the AsyncAPI parser accepts', async () => {
    const routes = [
      {
        match: 'order.created',
        targets: [
          { type: 'sqs' as const, queueUrl: 'https://sqs.eu-north-1.amazonaws.com/123456789012/orders.fifo' },
        ],
      },
      {
        match: 'order.*',
        targets: [
          { type: 'sqs' as const, queueUrl: 'https://sqs.eu-north-1.amazonaws.com/123456789012/billing' },
          { type: 'eventbridge' as const, busName: 'shop' },
        ],
      },
    ];
    const document = asyncApiDocument(events, { title: 'Shop events', version: '2.1.0', routes });
    const { document: parsed, diagnostics } = await new Parser().parse(document as never);
    const errors = diagnostics.filter((d) => d.severity === 0);
    expect(errors, JSON.stringify(errors, null, 2)).toEqual([]);
    expect(parsed).toBeDefined();
    expect(Object.keys(document.channels as object).sort()).toEqual([
      'eventbridge-shop',
      'sqs-billing',
      'sqs-orders.fifo',
    ]);
    expect(
      parsed
        ?.messages()
        .all()
        .map((m) => m.id())
        .sort(),
    ).toEqual([
      'order.cancelled.v1',
      'order.cancelled.v1.eventbridge',
      'order.created.v1',
      'order.created.v2',
    ]);
    // Two queues of one name in two accounts are two channels.
    const twin = asyncApiDocument(events, {
      title: 'Twins',
      routes: [
        {
          match: 'order.*',
          targets: [
            { type: 'sqs', queueUrl: 'https://sqs.eu-north-1.amazonaws.com/111111111111/orders' },
            { type: 'sqs', queueUrl: 'https://sqs.eu-north-1.amazonaws.com/222222222222/orders' },
          ],
        },
      ],
    });
    expect(Object.keys(twin.channels as object)).toEqual(['sqs-orders', 'sqs-orders-2']);
    // A document that is not AsyncAPI is refused: the check can fail.
    const broken = { ...document, channels: { bad: { address: 42 } } };
    const check = await new Parser().validate(broken as never);
    expect(check.filter((d) => d.severity === 0).length).toBeGreaterThan(0);
  });

  it('the CLI writes the schemas and the document from a module that exports the contracts', () => {
    const work = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-contracts-'));
    try {
      const module = path.join(work, 'events.mjs');
      fs.writeFileSync(
        module,
        `import { z } from ${JSON.stringify(path.join(root, 'node_modules/zod/index.js'))};
         import { defineEvents } from ${JSON.stringify(path.join(root, 'lib/contracts/index.ts'))};
         export const events = defineEvents({
           'invoice.paid': { schema: z.object({ invoiceId: z.string(), cents: z.int() }), aggregateType: 'invoice',
             targets: [{ type: 'sqs', queueUrl: 'https://sqs.eu-north-1.amazonaws.com/123456789012/invoices' }] },
         });`,
      );
      const out = execFileSync(
        path.join(root, 'node_modules/.bin/tsx'),
        [
          path.join(root, 'lib/cli/main.ts'),
          'contracts',
          '--module',
          module,
          '--out',
          path.join(work, 'out'),
          '--title',
          'Invoices',
        ],
        { cwd: work, encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '--conditions=outbox-source' } },
      );
      expect(
        out
          .trim()
          .split('\n')
          .map((f) => path.relative(work, f)),
      ).toEqual([path.join('out', 'schemas', 'invoice.paid.v1.json'), path.join('out', 'asyncapi.json')]);
      const doc = JSON.parse(fs.readFileSync(path.join(work, 'out', 'asyncapi.json'), 'utf8'));
      expect(doc).toMatchObject({ asyncapi: '3.0.0', info: { title: 'Invoices' } });
      expect(Object.keys(doc.channels)).toEqual(['sqs-invoices']);
      // A module without contracts: a clear error, exit 2.
      fs.writeFileSync(path.join(work, 'none.mjs'), 'export const x = 1;');
      let failed: { status: number; stderr: string } | undefined;
      try {
        execFileSync(
          path.join(root, 'node_modules/.bin/tsx'),
          [path.join(root, 'lib/cli/main.ts'), 'contracts', '--module', path.join(work, 'none.mjs')],
          {
            cwd: work,
            encoding: 'utf8',
            stdio: 'pipe',
          },
        );
      } catch (error) {
        failed = error as { status: number; stderr: string };
      }
      expect(failed?.status).toBe(2);
      expect(failed?.stderr).toMatch(
        /exports no defineEvents\(\.\.\.\) result as "events" or "default" \(exports: x\)/,
      );
    } finally {
      fs.rmSync(work, { recursive: true, force: true });
    }
  }, 60_000);
});
