import { beforeEach, describe, expect, it } from 'vitest';
import { ValidationError } from '../lib/errors.js';
import { type RedriveInput, redriveDeadLetters } from '../lib/operations/redrive.js';
import type { RouteConfig } from '../lib/publish/routes.js';
import type { RelayOptions } from '../lib/relay/options.js';
import { awsClients, createQueue, receiveAll, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { eventRows, insertEvents } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();

beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events');
});

/** Inserts events and turns them into dead letters (as the relay would leave them). */
async function deadLetters(
  count: number,
  options: { eventType?: string; aggregateId?: (i: number) => string; at?: string } = {},
): Promise<string[]> {
  const ids = await insertEvents(db.pool, count, (i) => ({
    ...(options.eventType ? { eventType: options.eventType } : {}),
    ...(options.aggregateId ? { aggregateId: options.aggregateId(i) } : {}),
  }));
  await db.pool.query(
    `UPDATE outbox_events
     SET attempts = 5, dead_lettered_at = coalesce($2::timestamptz, now()),
         last_error = 'broker said no to #' || seq, delivered_targets = '{sqs:https://q/accepted}'
     WHERE id = ANY($1::uuid[])`,
    [ids, options.at ?? null],
  );
  return ids;
}

/** Every column of every row: what "nothing changed" is checked against. */
async function snapshot() {
  const { rows } = await db.pool.query('SELECT * FROM outbox_events ORDER BY seq');
  return rows;
}

async function redriveState(ids: string[]) {
  const { rows } = await db.pool.query(
    `SELECT id, attempts, retry_after, locked_until, locked_by, dead_lettered_at, last_error,
            delivered_targets, redrive_count, redriven_at
     FROM outbox_events WHERE id = ANY($1::uuid[]) ORDER BY seq`,
    [ids],
  );
  return rows;
}

describe('redriveDeadLetters', () => {
  it('dry run changes nothing and reports what would be reset', async () => {
    const dead = await deadLetters(3, { eventType: 'order.shipped' });
    await insertEvents(db.pool, 2); // pending
    const before = await snapshot();

    const result = await redriveDeadLetters(db.pool, { eventType: 'order.shipped', dryRun: true });

    expect(result).toEqual({
      action: 'redrive',
      dryRun: true,
      matched: 3,
      reset: 0,
      discarded: 0,
      busy: 0,
      ids: dead,
    });
    expect(await snapshot()).toEqual(before);
  });

  it('by id: resets exactly those dead letters; pending and processed ids are not touched', async () => {
    const dead = await deadLetters(5);
    const [pending] = await insertEvents(db.pool, 1);
    const [processed] = await insertEvents(db.pool, 1);
    await db.pool.query('UPDATE outbox_events SET processed_at = now(), attempts = 1 WHERE id = $1', [
      processed,
    ]);
    const before = await snapshot();
    const chosen = [dead[1]!, dead[3]!];

    const result = await redriveDeadLetters(db.pool, { ids: [...chosen, pending!, processed!] });

    expect(result).toEqual({
      action: 'redrive',
      dryRun: false,
      matched: 2,
      reset: 2,
      discarded: 0,
      busy: 0,
      ids: chosen,
    });
    const after = await snapshot();
    for (const row of after) {
      if (!chosen.includes(row.id)) expect(row).toEqual(before.find((b) => b.id === row.id));
    }
    const reset = await redriveState(chosen);
    for (const row of reset) {
      expect(row).toMatchObject({
        attempts: 0,
        retry_after: null,
        locked_until: null,
        locked_by: null,
        dead_lettered_at: null,
        redrive_count: 1,
        // Kept: why it failed (history), and the target that already accepted it.
        last_error: expect.stringMatching(/^broker said no to #\d+$/),
        delivered_targets: ['sqs:https://q/accepted'],
      });
      expect(row.redriven_at).toBeInstanceOf(Date);
    }
  });

  it('by type and aggregate: only the matching dead letters', async () => {
    const shipped = await deadLetters(3, { eventType: 'order.shipped', aggregateId: (i) => `o-${i}` });
    const created = await deadLetters(2, { eventType: 'order.created' });
    const result = await redriveDeadLetters(db.pool, { eventType: 'order.shipped' });
    expect(result).toMatchObject({ matched: 3, reset: 3, ids: shipped });
    expect((await redriveState(created)).every((r) => r.dead_lettered_at !== null)).toBe(true);

    // Dead again; now only one aggregate's. Filters combine with AND.
    await db.pool.query(`UPDATE outbox_events SET dead_lettered_at = now() WHERE id = ANY($1::uuid[])`, [
      shipped,
    ]);
    expect(
      await redriveDeadLetters(db.pool, { aggregateType: 'invoice', aggregateId: 'o-1', dryRun: true }),
    ).toMatchObject({ matched: 0, ids: [] });
    const one = await redriveDeadLetters(db.pool, { aggregateType: 'order', aggregateId: 'o-1' });
    expect(one).toMatchObject({ matched: 1, reset: 1, ids: [shipped[1]] });
    expect((await redriveState(shipped)).map((r) => r.redrive_count)).toEqual([1, 2, 1]);
  });

  it('by window: [after, before) on dead_lettered_at', async () => {
    const ten = await deadLetters(1, { at: '2025-03-01T10:00:00Z' });
    const eleven = await deadLetters(2, { at: '2025-03-01T11:00:00Z' });
    const noon = await deadLetters(1, { at: '2025-03-01T12:00:00Z' });

    const preview = await redriveDeadLetters(db.pool, {
      deadLetteredAfter: '2025-03-01T11:00:00Z',
      deadLetteredBefore: '2025-03-01T12:00:00Z',
      dryRun: true,
    });
    expect(preview).toMatchObject({ matched: 2, ids: eleven });

    // An offset is honoured: 12:30+02:00 is 10:30Z.
    const result = await redriveDeadLetters(db.pool, {
      deadLetteredAfter: '2025-03-01T12:30:00+02:00',
      deadLetteredBefore: '2025-03-01T12:00:00Z',
    });
    expect(result).toMatchObject({ matched: 2, reset: 2, ids: eleven });
    expect((await redriveState([...ten, ...noon])).every((r) => r.dead_lettered_at !== null)).toBe(true);

    const rest = await redriveDeadLetters(db.pool, { deadLetteredBefore: '2025-03-01T11:00:00Z' });
    expect(rest).toMatchObject({ matched: 1, reset: 1, ids: ten });
  });

  it('limit: resets the oldest n (by seq); matched counts them all; the next call takes the next n', async () => {
    const dead = await deadLetters(5);
    expect(await redriveDeadLetters(db.pool, { all: true, limit: 2 })).toEqual({
      action: 'redrive',
      dryRun: false,
      matched: 5,
      reset: 2,
      discarded: 0,
      busy: 0,
      ids: dead.slice(0, 2),
    });
    expect(await redriveDeadLetters(db.pool, { all: true, limit: 2 })).toMatchObject({
      matched: 3,
      ids: dead.slice(2, 4),
    });
    expect(await redriveDeadLetters(db.pool, { all: true })).toMatchObject({
      matched: 1,
      ids: dead.slice(4),
    });
    expect(await redriveDeadLetters(db.pool, { all: true })).toEqual({
      action: 'redrive',
      dryRun: false,
      matched: 0,
      reset: 0,
      discarded: 0,
      busy: 0,
      ids: [],
    });
  });

  it('a discard lifts the parks a claim put on the rows behind its dead letter: the aggregate goes at once', async () => {
    const [dead] = await deadLetters(1, { aggregateId: () => 'parked' });
    const behind = await insertEvents(db.pool, 2, () => ({ aggregateId: 'parked' }));
    // As an ordered claim leaves a dead letter's tail when its look was capped (claim-ordered.ts).
    await db.pool.query(
      "UPDATE outbox_events SET parked_until = now() + interval '1 minute', retry_after = now() + interval '1 minute' WHERE id = ANY($1::uuid[])",
      [behind],
    );
    const other = await insertEvents(db.pool, 1, () => ({ aggregateId: 'other' }));
    await db.pool.query(
      "UPDATE outbox_events SET parked_until = now() + interval '1 minute', retry_after = now() + interval '1 minute' WHERE id = ANY($1::uuid[])",
      [other],
    );
    const result = await redriveDeadLetters(db.pool, { ids: [dead as string], action: 'discard' });
    expect(result).toMatchObject({ discarded: 1 });
    const { rows } = await db.pool.query(
      'SELECT id, retry_after, parked_until FROM outbox_events WHERE id = ANY($1::uuid[]) ORDER BY seq',
      [[...behind, ...other]],
    );
    expect(rows.slice(0, 2).map((r) => [r.retry_after, r.parked_until])).toEqual([
      [null, null],
      [null, null],
    ]);
    // Another aggregate's park is not the discard's business.
    expect(rows[2].parked_until).not.toBeNull();
  });

  it('two redrives at once reset each row exactly once', async () => {
    await deadLetters(200);
    const results = await Promise.all([
      redriveDeadLetters(db.pool, { all: true, limit: 10_000 }),
      redriveDeadLetters(db.pool, { all: true, limit: 10_000 }),
      redriveDeadLetters(db.pool, { eventType: 'order.created', limit: 10_000 }),
    ]);
    expect(results.reduce((sum, r) => sum + r.reset, 0)).toBe(200);
    const { rows } = await db.pool.query(
      'SELECT redrive_count, count(*)::int AS n FROM outbox_events GROUP BY 1',
    );
    expect(rows).toEqual([{ redrive_count: 1, n: 200 }]);
  });

  describe('invalid input → ValidationError naming the field; nothing changed', () => {
    const cases: Array<[string, unknown, string, RegExp]> = [
      ['unknown key', { eventType: 'order.created', evenType: 'x' }, 'evenType', /is not a redrive option/],
      ['bad uuid', { ids: ['4f1c0e4e-0000-0000-0000-00000000000g'] }, 'ids[0]', /must be a UUID/],
      ['empty id list', { ids: [] }, 'ids', /at least one id/],
      ['limit over the maximum', { all: true, limit: 10_001 }, 'limit', /at most 10000/],
      ['limit zero', { all: true, limit: 0 }, 'limit', /at least 1/],
      ['limit not whole', { all: true, limit: 2.5 }, 'limit', /whole number/],
      [
        'window after > before',
        { deadLetteredAfter: '2025-03-02T00:00:00Z', deadLetteredBefore: '2025-03-01T00:00:00Z' },
        'deadLetteredAfter',
        /must be earlier than deadLetteredBefore/,
      ],
      ['not a date-time', { deadLetteredBefore: 'yesterday' }, 'deadLetteredBefore', /ISO 8601/],
      ['no offset', { deadLetteredBefore: '2025-03-01T00:00:00' }, 'deadLetteredBefore', /with an offset/],
      ['empty filter', {}, 'all', /no filter given/],
      ['only a dry run', { dryRun: true }, 'all', /no filter given/],
      ['all: false', { all: false, limit: 5 }, 'all', /no filter given/],
      ['all as a string', { all: 'yes' }, 'all', /true or false/],
      ['empty event type', { eventType: '' }, 'eventType', /non-empty/],
      ['not an object', ['order.created'], 'input', /JSON object/],
    ];

    it.each(cases)('%s', async (_name, input, field, message) => {
      await deadLetters(3);
      const before = await snapshot();
      const error = await redriveDeadLetters(db.pool, input as RedriveInput).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ValidationError);
      expect(error).toMatchObject({ name: 'ValidationError', field });
      expect((error as Error).message).toMatch(new RegExp(`^${field.replace(/[[\]]/g, '\\$&')}: `));
      expect((error as Error).message).toMatch(message);
      expect(await snapshot()).toEqual(before);
    });
  });
});

describe('redrive → relay publishes again', () => {
  const relayFor = (routes: RouteConfig[], options: RelayOptions = {}) =>
    emulatorRelay(db.pool, aws, routes, options).relay;
  const drain = drainUntilIdle;
  const bodies = async (url: string, count: number, timeoutMs?: number) =>
    (await receiveAll(aws.sqs, url, count, timeoutMs)).map((m) => JSON.parse(m.Body as string).id).sort();

  it('events dead-lettered for want of a route are published once the route exists and they are redriven', async () => {
    const orders = await createQueue(aws.sqs, uniqueName('redrive-orders'));
    const invoices = await createQueue(aws.sqs, uniqueName('redrive-invoices'));
    const invoiceIds = await insertEvents(db.pool, 3, (i) => ({
      eventType: 'invoice.sent',
      aggregateType: 'invoice',
      aggregateId: `inv-${i}`,
    }));
    const orderIds = await insertEvents(db.pool, 2);
    const before = relayFor([{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: orders.url }] }]);
    expect(await drain(before)).toMatchObject({ published: 2, deadLettered: 3 });

    // The route is fixed; a redrive of the type (after a dry run) sends them.
    const fixed = relayFor([
      { match: 'order.*', targets: [{ type: 'sqs', queueUrl: orders.url }] },
      { match: 'invoice.*', targets: [{ type: 'sqs', queueUrl: invoices.url }] },
    ]);
    expect(await drain(fixed)).toMatchObject({ claimed: 0 });
    expect(await redriveDeadLetters(db.pool, { eventType: 'invoice.sent', dryRun: true })).toMatchObject({
      matched: 3,
      ids: invoiceIds,
    });
    expect(await redriveDeadLetters(db.pool, { eventType: 'invoice.sent' })).toMatchObject({ reset: 3 });
    expect(await drain(fixed)).toMatchObject({ claimed: 3, published: 3, deadLettered: 0 });

    expect(await bodies(invoices.url, 3)).toEqual([...invoiceIds].sort());
    expect(await bodies(orders.url, 2)).toEqual([...orderIds].sort());
    const rows = await eventRows(db.pool);
    expect(rows.every((r) => r.processed_at !== null && r.dead_lettered_at === null)).toBe(true);
    const { rows: counts } = await db.pool.query(
      `SELECT redrive_count, attempts, count(*)::int AS n FROM outbox_events GROUP BY 1, 2 ORDER BY 1`,
    );
    expect(counts).toEqual([
      { redrive_count: 0, attempts: 1, n: 2 },
      { redrive_count: 1, attempts: 1, n: 3 },
    ]);
  });

  it('a redriven multi-target event is only re-sent to the target that had not accepted it', async () => {
    const accepted = await createQueue(aws.sqs, uniqueName('redrive-accepted'));
    const missing = `${aws.endpoint}/000000000000/${uniqueName('redrive-missing')}`;
    const [id] = await insertEvents(db.pool, 1);
    const broken = relayFor(
      [
        {
          match: '*',
          targets: [
            { type: 'sqs', queueUrl: accepted.url },
            { type: 'sqs', queueUrl: missing },
          ],
        },
      ],
      // A missing queue is the environment's failure and spends no attempt;
      // a maximum pending age of 0 dead-letters the event at once instead.
      { maxAttempts: 1, maxPendingAgeMs: 0 },
    );
    expect(await drain(broken)).toMatchObject({ deadLettered: 1 });
    expect(await bodies(accepted.url, 1)).toEqual([id]);

    const second = await createQueue(aws.sqs, uniqueName('redrive-second'));
    const fixed = relayFor([
      {
        match: '*',
        targets: [
          { type: 'sqs', queueUrl: accepted.url },
          { type: 'sqs', queueUrl: second.url },
        ],
      },
    ]);
    expect(await redriveDeadLetters(db.pool, { ids: [id!] })).toMatchObject({ reset: 1 });
    expect(await drain(fixed)).toMatchObject({ published: 1 });
    expect(await bodies(second.url, 1)).toEqual([id]);
    // receiveAll keeps the first copy invisible; a second copy would show up here.
    expect(await bodies(accepted.url, 1, 2500)).toEqual([]);
  });
});
