import { beforeEach, describe, expect, it } from 'vitest';
import { withTransaction } from '../lib/db/transaction.js';
import { ValidationError } from '../lib/errors.js';
import { createOrder } from '../lib/example/orders.js';
import { enqueueEvent, enqueueEvents } from '../lib/outbox/enqueue.js';
import { BROKER_MESSAGE_MAX_BYTES, MAX_PAYLOAD_DEPTH } from '../lib/outbox/limits.js';
import type { OutboxEvent } from '../lib/outbox/types.js';
import { validateEvent } from '../lib/outbox/validate-event.js';
import { eventBridgeMessage, sqsMessage } from '../lib/publish/messages.js';
import { useTestDatabase } from './support/database.js';

const db = useTestDatabase();

beforeEach(async () => {
  await db.pool.query('TRUNCATE orders, outbox_events');
});

async function counts() {
  const { rows } = await db.pool.query<{ orders: number; events: number }>(
    `SELECT (SELECT count(*) FROM orders)::int AS orders,
            (SELECT count(*) FROM outbox_events)::int AS events`,
  );
  return rows[0];
}

const order = { customerId: 'customer-1', totalCents: 4200, currency: 'SEK' };

describe('createOrder: business row and event in one transaction', () => {
  it('commits the order and its order.created event together', async () => {
    const { orderId, eventId } = await createOrder(db.pool, order, {
      headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    });
    const { rows } = await db.pool.query(
      'SELECT aggregate_type, aggregate_id, event_type, payload, headers, attempts, processed_at FROM outbox_events WHERE id = $1',
      [eventId],
    );
    expect(rows).toEqual([
      {
        aggregate_type: 'order',
        aggregate_id: orderId,
        event_type: 'order.created',
        payload: { orderId, ...order },
        // The contract's version travels with the event (lib/example/events.ts).
        headers: {
          traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
          'event-version': '1',
        },
        attempts: 0,
        processed_at: null,
      },
    ]);
    expect(await counts()).toEqual({ orders: 1, events: 1 });
  });

  it('leaves neither row when the transaction fails after the outbox insert', async () => {
    // If the event were written outside the order's transaction (its own
    // connection or autocommit), the event row would survive this failure.
    await expect(
      createOrder(db.pool, order, {
        beforeCommit: () => {
          throw new Error('crash after both inserts');
        },
      }),
    ).rejects.toThrow('crash after both inserts');
    expect(await counts()).toEqual({ orders: 0, events: 0 });
  });

  it('leaves neither row on an explicit rollback', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        `INSERT INTO orders (id, customer_id, total_cents, currency) VALUES (gen_random_uuid(), 'c', 1, 'EUR')`,
      );
      await enqueueEvent(client, {
        aggregateType: 'order',
        aggregateId: 'x',
        eventType: 'order.created',
        payload: {},
      });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await counts()).toEqual({ orders: 0, events: 0 });
  });

  it('rejects a bad order before touching the database', async () => {
    await expect(createOrder(db.pool, { ...order, currency: 'kronor' })).rejects.toMatchObject({
      name: 'ValidationError',
      field: 'order.currency',
    });
    expect(await counts()).toEqual({ orders: 0, events: 0 });
  });
});

describe('enqueueEvents', () => {
  it('writes many events in one call, in order, returning their ids', async () => {
    const ids = await withTransaction(db.pool, (client) =>
      enqueueEvents(
        client,
        Array.from({ length: 1500 }, (_, i) => ({
          aggregateType: 'order',
          aggregateId: `o-${i % 7}`,
          eventType: 'order.updated',
          payload: { i },
        })),
      ),
    );
    expect(ids).toHaveLength(1500);
    const { rows } = await db.pool.query<{ id: string; i: number }>(
      `SELECT id, (payload->>'i')::int AS i FROM outbox_events ORDER BY seq`,
    );
    expect(rows.map((r) => r.id)).toEqual(ids);
    expect(rows.map((r) => r.i)).toEqual(ids.map((_, i) => i));
  });

  it('keeps a caller-supplied id', async () => {
    const id = '0b0b1c3e-8f4e-4f63-9a3c-1d2e3f4a5b6c';
    await expect(
      enqueueEvent(db.pool, { id, aggregateType: 'a', aggregateId: '1', eventType: 't', payload: 1 }),
    ).resolves.toBe(id);
  });

  const valid = { aggregateType: 'order', aggregateId: 'o-1', eventType: 'order.created', payload: {} };
  const circular: Record<string, unknown> = {};
  circular.self = circular;
  const cases: Array<[string, Record<string, unknown>, string, RegExp]> = [
    ['empty aggregate type', { aggregateType: '' }, 'events[1].aggregateType', /non-empty/],
    ['blank aggregate id', { aggregateId: '   ' }, 'events[1].aggregateId', /non-empty/],
    ['missing event type', { eventType: undefined }, 'events[1].eventType', /non-empty/],
    ['aggregate type too long', { aggregateType: 'a'.repeat(256) }, 'events[1].aggregateType', /at most 255/],
    ['aggregate id too long', { aggregateId: 'é'.repeat(256) }, 'events[1].aggregateId', /at most 255/],
    ['event type too long', { eventType: 't'.repeat(129) }, 'events[1].eventType', /at most 128/],
    ['circular payload', { payload: circular }, 'events[1].payload.self', /circular reference/],
    [
      'bigint payload',
      { payload: { n: 1n } },
      'events[1].payload.n',
      /BigInt, which is not JSON-serializable/,
    ],
    ['undefined payload', { payload: undefined }, 'events[1].payload', /not JSON-serializable/],
    ['function payload', { payload: () => 1 }, 'events[1].payload', /not JSON-serializable/],
    ['NUL in payload', { payload: { s: 'a\u0000b' } }, 'events[1].payload.s', /NUL/],
    [
      'oversize payload',
      { payload: 'x'.repeat(BROKER_MESSAGE_MAX_BYTES) },
      'events[1].payload',
      /over the 1048576-byte message limit/,
    ],
    ['non-string header', { headers: { n: 1 } }, 'events[1].headers.n', /must be a string/],
    ['bad id', { id: 'not-a-uuid' }, 'events[1].id', /UUID/],
    // Headers must be a plain object of strings: anything else used to be
    // stored as some other JSON value that no consumer could read as headers.
    ['Date as headers', { headers: new Date() }, 'events[1].headers', /plain object.*got a Date object/],
    ['Map as headers', { headers: new Map([['a', 'b']]) }, 'events[1].headers', /got a Map object/],
    ['class instance as headers', { headers: new (class Trace {})() }, 'events[1].headers', /got a Trace/],
    ['array as headers', { headers: ['a'] }, 'events[1].headers', /got an array/],
    ['string as headers', { headers: 'traceparent' }, 'events[1].headers', /got string/],
    // A lone surrogate fails jsonb's INSERT halfway through the caller's transaction.
    [
      'lone surrogate deep in the payload',
      { payload: { items: [{ name: 'ok' }, { name: 'x\uDC00' }] } },
      'events[1].payload.items[1].name',
      /lone UTF-16 surrogate \(\\udc00\)/,
    ],
    [
      'lone surrogate in a payload key',
      { payload: { list: [{ 'k\uD83D': 1 }] } },
      'events[1].payload.list[0]["k\\ud83d"]',
      /has a name that contains a lone UTF-16 surrogate/,
    ],
    ['lone surrogate in a header', { headers: { t: '\uD800' } }, 'events[1].headers.t', /lone UTF-16/],
    ['lone surrogate in the aggregate id', { aggregateId: 'a\uDBFF' }, 'events[1].aggregateId', /lone/],
    // SQS refuses U+FFFE/U+FFFF anywhere (JSON does not escape them), and control
    // characters in the raw attribute values (event type, aggregate type and id).
    ['U+FFFF in the payload', { payload: ['\uFFFF'] }, 'events[1].payload[0]', /U\+FFFF, which SQS refuses/],
    [
      'U+FFFE in a header name',
      { headers: { 'x\uFFFE': 'v' } },
      'events[1].headers["x\uFFFE"]',
      /has a name that contains the character U\+FFFE/,
    ],
    ['control character in the event type', { eventType: 'order\u0001' }, 'events[1].eventType', /U\+0001/],
    ['U+FFFE in the aggregate type', { aggregateType: 'o\uFFFE' }, 'events[1].aggregateType', /U\+FFFE/],
    ['escape in the aggregate id', { aggregateId: 'a\u001bb' }, 'events[1].aggregateId', /U\+001B/],
    ['NUL in a payload key', { payload: { 'a\u0000': 1 } }, 'events[1].payload["a\\u0000"]', /NUL/],
    // EventBridge accepts JSON integers within 64 bits only.
    ['2^63 in the payload', { payload: { n: 2 ** 63 } }, 'events[1].payload.n', /outside the 64-bit/],
    ['-2^63 in the payload', { payload: { n: -(2 ** 63) } }, 'events[1].payload.n', /outside the 64-bit/],
    ['1e21 in the payload', { payload: { a: [1, 1e21] } }, 'events[1].payload.a[1]', /outside the 64-bit/],
    ['bigint deep in the payload', { payload: { a: [{ n: 10n }] } }, 'events[1].payload.a[0].n', /BigInt/],
  ];
  it.each(cases)(
    '%s → ValidationError naming the field, nothing written',
    async (_, patch, field, message) => {
      const error = await enqueueEvents(db.pool, [valid, { ...valid, ...patch }]).catch((e) => e);
      expect(error).toBeInstanceOf(ValidationError);
      expect(error.field).toBe(field);
      expect(error.message).toMatch(message);
      expect(await counts()).toEqual({ orders: 0, events: 0 });
    },
  );

  it('refuses nesting deeper than EventBridge processes, naming where it goes too deep', async () => {
    const nested = (levels: number): unknown => {
      let value: unknown = 'leaf';
      for (let i = 0; i < levels; i++) value = [value];
      return value;
    };
    const error = await enqueueEvents(db.pool, [
      valid,
      { ...valid, payload: nested(MAX_PAYLOAD_DEPTH + 1) },
    ]).catch((e) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect(error.field).toBe(`events[1].payload${'[0]'.repeat(MAX_PAYLOAD_DEPTH)}`);
    expect(error.message).toMatch(/nests deeper than the 998 levels EventBridge processes/);
    expect(await counts()).toEqual({ orders: 0, events: 0 });

    await enqueueEvent(db.pool, { ...valid, payload: nested(MAX_PAYLOAD_DEPTH) });
    expect(await counts()).toEqual({ orders: 0, events: 1 });
  });

  it('accepts what every hop carries: escaped control characters, 64-bit edges, dates, a literal \\u0000', async () => {
    const payload = {
      text: 'tab\tline\nbell\u0007esc\u001b',
      emoji: '😀',
      near: [2 ** 63 - 1024, -(2 ** 63) + 1024],
      at: new Date('2024-01-02T03:04:05.678Z'),
      backslash: '\\u0000 and \\ud800 are text here',
      tiny: 1.5e-7,
    };
    const id = await enqueueEvent(db.pool, {
      ...valid,
      aggregateId: 'tab\tis fine',
      payload,
      headers: { 'x-note': 'a\u0001b' },
    });
    const { rows } = await db.pool.query('SELECT payload, headers FROM outbox_events WHERE id = $1', [id]);
    expect(rows[0].payload).toEqual(JSON.parse(JSON.stringify(payload)));
    expect(rows[0].headers).toEqual({ 'x-note': 'a\u0001b' });
  });

  it('honours a configured payload limit', async () => {
    const error = await enqueueEvent(
      db.pool,
      { ...valid, payload: 'x'.repeat(100) },
      { maxPayloadBytes: 50 },
    ).catch((e) => e);
    expect(error).toMatchObject({ name: 'ValidationError', field: 'events[0].payload' });
    expect(error.message).toContain('102 bytes serialized, over the limit of 50 bytes');
  });

  it('rejects the same id twice in one call', async () => {
    const id = '6f9619ff-8b86-4011-b42d-00c04fc964ff';
    await expect(
      enqueueEvents(db.pool, [
        { ...valid, id },
        { ...valid, id },
      ]),
    ).rejects.toMatchObject({
      field: 'events[1].id',
    });
    expect(await counts()).toEqual({ orders: 0, events: 0 });
  });

  it.each([true, false])(
    'is all or nothing on a pool: 2,501 events whose last one the database refuses leave no row (lockAggregates %s)',
    async (lockAggregates) => {
      const taken = await enqueueEvent(db.pool, valid);
      const events = Array.from({ length: 2_500 }, (_, i) => ({ ...valid, aggregateId: `order-${i % 7}` }));
      // Valid as an event; only the database sees that its id is stored already.
      const error = await enqueueEvents(db.pool, [...events, { ...valid, id: taken }], {
        lockAggregates,
      }).catch((e) => e);
      expect(error).toMatchObject({ code: '23505' });
      expect(await counts()).toEqual({ orders: 0, events: 1 });
      // The same call without the bad one: every event, once.
      expect(await enqueueEvents(db.pool, events, { lockAggregates })).toHaveLength(2_500);
      expect(await counts()).toEqual({ orders: 0, events: 2_501 });
    },
  );

  it('refuses a call larger than one statement can carry, before writing anything', async () => {
    // 33 payloads of 8 MiB: over ENQUEUE_CALL_MAX_BYTES (256 MiB) together, each within the limit given.
    const payload = { blob: 'x'.repeat(8 * 1024 * 1024) };
    const events = Array.from({ length: 33 }, () => ({ ...valid, payload }));
    const error = await enqueueEvents(db.pool, events, {
      largePayloads: true,
      maxPayloadBytes: 9 * 1024 * 1024,
    }).catch((e) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect(error).toMatchObject({ field: 'events' });
    expect(error.message).toMatch(/at most 268435456 bytes.*several calls inside one transaction/);
    expect(await counts()).toEqual({ orders: 0, events: 0 });
  });
});

describe('size: the exact message the relay will send must fit', () => {
  const event = { aggregateType: 'order', aggregateId: 'o-1', eventType: 'order.created' };

  /** The messages the relay builds from the stored row, as the claim returns it. */
  async function publishedBytes(id: string, source: string) {
    const { rows } = await db.pool.query(
      `SELECT id, seq::text, aggregate_type, aggregate_id, event_type, payload, payload::text AS payload_json,
              headers, created_at FROM outbox_events WHERE id = $1`,
      [id],
    );
    const row = rows[0];
    const stored: OutboxEvent = {
      id: row.id,
      seq: row.seq,
      aggregateType: row.aggregate_type,
      aggregateId: row.aggregate_id,
      eventType: row.event_type,
      payload: row.payload,
      payloadJson: row.payload_json,
      headers: row.headers,
      createdAt: row.created_at,
      attempts: 1,
      deliveredTargets: [],
    };
    return {
      sqs: sqsMessage(stored, { fifo: true }).bytes,
      eventBridge: eventBridgeMessage(stored, { busName: 'bus', source }).bytes,
    };
  }

  it('computes the same bytes as the messages built from the stored row', async () => {
    const tricky = {
      ...event,
      id: '2f1c3a4b-5d6e-4f70-8a9b-0c1d2e3f4a5b',
      aggregateId: 'åäö-😀',
      payload: {
        nested: { a: [1, [2, { b: [] }], {}], 'quoted "key"': 'line\nbreak\u0001' },
        numbers: [0, -0, 1.5, -2.5e-10, 1.5e-7, 5e-324, 2 ** 53 + 2, 2 ** 63 - 1024],
        text: 'é😀 \\ / </script>',
        flags: [true, false, null],
        skipped: undefined,
        at: new Date('2024-01-02T03:04:05.678Z'),
      },
      headers: {
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        'x-note': 'ünïcødé',
      },
    };
    const valid = validateEvent(tricky, { eventBridgeSource: 'com.example.orders' });
    await enqueueEvent(db.pool, tricky);
    expect(await publishedBytes(tricky.id, 'com.example.orders')).toEqual(valid.messageBytes);
  });

  it('refuses a payload that fits as JSON.stringify writes it but not as stored and published', async () => {
    // 700,001 bytes from JSON.stringify ("1.5e-7"); jsonb stores and prints
    // each as 0.00000015: 1,100,001 bytes as published.
    const error = await enqueueEvents(db.pool, [
      { ...event, payload: {} },
      { ...event, payload: new Array(100_000).fill(1.5e-7) },
    ]).catch((e) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect(error.field).toBe('events[1].payload');
    expect(error.message).toMatch(
      /makes the event 110\d{4} bytes as an EventBridge entry \(counting the longest Source, 768 bytes\), \d+ bytes over the 1048576-byte message limit/,
    );
    expect(await counts()).toEqual({ orders: 0, events: 0 });
  });

  it('accepts a message of exactly the limit and refuses one byte more, headers and attributes counted', async () => {
    const source = 'com.example.orders';
    const headers = {
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      'x-padding': 't'.repeat(3000),
    };
    const sized = (length: number) => ({ ...event, payload: { s: 'x'.repeat(length) }, headers });
    const probe = validateEvent(sized(1000), { eventBridgeSource: source }).messageBytes;
    const fits = 1000 + BROKER_MESSAGE_MAX_BYTES - Math.max(probe.sqs, probe.eventBridge);

    const id = await enqueueEvent(db.pool, sized(fits), { eventBridgeSource: source });
    const sent = await publishedBytes(id, source);
    expect(Math.max(sent.sqs, sent.eventBridge)).toBe(BROKER_MESSAGE_MAX_BYTES);

    const error = await enqueueEvent(db.pool, sized(fits + 1), { eventBridgeSource: source }).catch((e) => e);
    expect(error).toMatchObject({ name: 'ValidationError', field: 'events[0].payload' });
    expect(error.message).toContain(`1 byte over the ${BROKER_MESSAGE_MAX_BYTES}-byte message limit`);
    expect(await counts()).toEqual({ orders: 0, events: 1 });
  });

  it('counts the SQS attributes when they make the larger message', async () => {
    const wide = { ...event, aggregateType: '😀'.repeat(255), aggregateId: '😀'.repeat(255), payload: {} };
    const { sqs, eventBridge } = validateEvent(wide, { eventBridgeSource: 'o' }).messageBytes;
    expect(sqs).toBeGreaterThan(eventBridge);
    const error = await enqueueEvent(db.pool, wide, {
      eventBridgeSource: 'o',
      maxMessageBytes: sqs - 1,
    }).catch((e) => e);
    expect(error.message).toMatch(/as an SQS message \(body and attributes\), 1 byte over/);
  });
});

describe('withTransaction', () => {
  it('refuses to report success when a failed statement was swallowed inside', async () => {
    const error = await withTransaction(db.pool, async (client) => {
      await enqueueEvent(client, { aggregateType: 'a', aggregateId: '1', eventType: 't', payload: {} });
      await client.query('SELECT 1/0').catch(() => {}); // the caller "handles" it
      return 'ok';
    }).catch((e) => e);
    expect(error).toMatchObject({
      name: 'TransactionRolledBackError',
      message: expect.stringMatching(/rolled back/),
    });
    expect(await counts()).toEqual({ orders: 0, events: 0 });
  });
});
