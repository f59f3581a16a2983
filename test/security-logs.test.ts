// "Payloads are never logged", as a test. Personal-looking values (an
// e-mail address, a name) go through zod and valibot contracts at the
// producer (refused at enqueue, and accepted), through the relay to a real
// queue of the emulator, and through the consumer, whose stricter contracts
// refuse them. Every log line, every error (message, cause, stack, every
// property, enumerable or not) and every error the database keeps
// (`last_error`, the dedupe rows) is then searched: the values must not be
// there. valibot quotes the value in its own messages (`Invalid email:
// Received "..."`), so errors must be built from an issue's path and kind.
import { inspect } from 'node:util';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import * as v from 'valibot';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createConsumer } from '../lib/consumer/consumer.js';
import { ContractViolationError, defineEvents } from '../lib/contracts/define.js';
import { ValidationError } from '../lib/errors.js';
import { awsClients, createQueue, drainQueue, uniqueName } from './support/aws.js';
import { useTestDatabase } from './support/database.js';
import { captureLogger } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

const db = useTestDatabase();
const aws = awsClients();

const savedEnv = { ...process.env };
beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox_events, processed_events');
});
afterEach(() => {
  process.env = { ...savedEnv };
});

// Valid for the producers' contracts, refused by the consumers' stricter ones.
const EMAIL = 'jane.doe@example.com';
const NAME = 'Jane Personal-Doe';
// Refused by the producers' contracts too.
const BAD_EMAIL = 'jane.doe@example';
const LONG_NAME = `${NAME} ${'Personal-Doe '.repeat(5)}`;
/** Parts of the values above: none may appear anywhere. */
const PERSONAL = ['jane.doe', 'Jane Personal', 'Personal-Doe', 'example.com', '@example'];

/** Everything a logger or an error reporter could print of a value: all properties, hidden ones too. */
function printed(value: unknown): string {
  const options = { depth: 20, showHidden: true, maxArrayLength: null, maxStringLength: null, getters: true };
  let json = '';
  try {
    json = JSON.stringify(value, (_key, v) =>
      v instanceof Error ? { ...v, name: v.name, message: v.message, stack: v.stack, cause: v.cause } : v,
    );
  } catch {
    // A cycle: inspect below still prints it.
  }
  return `${inspect(value, options)}\n${json}\n${value instanceof Error ? String(value) : ''}`;
}

function expectNothingPersonal(what: string, text: string) {
  for (const part of PERSONAL) {
    expect(text.includes(part), `${what} contains "${part}":\n${text.slice(0, 4000)}`).toBe(false);
  }
}

// The producers' contracts: one zod, one valibot.
const produced = defineEvents({
  'customer.registered': {
    schema: z.object({ customer: z.object({ email: z.email(), name: z.string().max(40) }) }),
    aggregateType: 'customer',
  },
  'customer.renamed': {
    schema: v.object({
      customer: v.object({
        email: v.pipe(v.string(), v.email()),
        name: v.pipe(v.string(), v.maxLength(40)),
      }),
    }),
    aggregateType: 'customer',
  },
});

// The consumers': stricter, so the same payloads break them.
const consumed = defineEvents({
  'customer.registered': z.object({
    customer: z.object({ email: z.email().endsWith('.org'), name: z.string().regex(/^[A-Z]+$/) }),
  }),
  'customer.renamed': v.object({
    customer: v.object({
      email: v.pipe(v.string(), v.email(), v.regex(/\.org$/)),
      name: v.pipe(v.string(), v.regex(/^[A-Z]+$/)),
    }),
  }),
});

describe('payloads are never logged', () => {
  it('a payload refused by a zod or valibot contract at enqueue: the error names path and kind, never the value', async () => {
    const errors: unknown[] = [];
    const bad = { customer: { email: BAD_EMAIL, name: LONG_NAME } };
    for (const type of ['customer.registered', 'customer.renamed'] as const) {
      errors.push(
        await produced.enqueue(db.pool, type, { aggregateId: 'c-1', payload: bad }).catch((e) => e),
      );
      errors.push(await produced.validate(type, bad).catch((e) => e));
      errors.push(
        await produced
          .enqueueMany(db.pool, [
            { type, aggregateId: 'c-1', payload: { customer: { email: 7, name: NAME } } } as never,
          ])
          .catch((e) => e),
      );
    }
    for (const error of errors) {
      expect(error).toBeInstanceOf(ValidationError);
      expectNothingPersonal('a producer error', printed(error));
    }
    // Still useful: the field, and which check failed.
    expect((errors[0] as ValidationError).message).toBe(
      'payload.customer.email: customer.registered v1: invalid_format (email) (and payload.customer.name: too_big)',
    );
    expect((errors[3] as ValidationError).message).toBe(
      'payload.customer.email: customer.renamed v1: email (and payload.customer.name: max_length)',
    );
    expect((errors[5] as ValidationError).field).toBe('events[0].payload.customer.email');
    expect((errors[5] as ValidationError).message).toMatch(/invalid_type \(expected string\)$/);
    // A toJSON that throws with the value in its message.
    const thrown = await produced
      .enqueue(db.pool, 'customer.registered', {
        aggregateId: 'c-1',
        payload: {
          customer: {
            email: EMAIL,
            name: {
              toJSON() {
                throw new Error(`cannot serialize ${NAME}`);
              },
            },
          },
        } as never,
      })
      .catch((e) => e);
    expect(thrown).toMatchObject({ name: 'ValidationError', field: 'payload.customer.name' });
    expectNothingPersonal('a serialization error', printed(thrown));
    expect((await db.pool.query('SELECT count(*)::int AS n FROM outbox_events')).rows[0].n).toBe(0);
  });

  it('producer, relay, queue and consumer with zod and valibot contracts: no log line, error or stored error holds a payload value', async () => {
    const queue = await createQueue(aws.sqs, uniqueName('security-logs'));
    const payload = { customer: { email: EMAIL, name: NAME } };
    await produced.enqueue(db.pool, 'customer.registered', { aggregateId: 'c-1', payload });
    await produced.enqueue(db.pool, 'customer.renamed', { aggregateId: 'c-2', payload });
    // One the relay cannot publish (no route): its reason is stored in last_error.
    await produced.enqueue(db.pool, 'customer.registered', { aggregateId: 'c-3', payload });
    await db.pool.query(
      `UPDATE outbox_events SET event_type = 'account.unrouted' WHERE aggregate_id = 'c-3'`,
    );
    const { relay, log: relayLog } = emulatorRelay(db.pool, aws, [
      { match: 'customer.*', targets: [{ type: 'sqs', queueUrl: queue.url }] },
    ]);
    expect(await drainUntilIdle(relay)).toMatchObject({ published: 2 });

    const consumerLog = captureLogger();
    const consumer = createConsumer({
      name: 'security-logs',
      pool: db.pool,
      handlers: consumed.handlers({
        'customer.registered': async () => {},
        'customer.renamed': async () => {},
      }),
      logger: consumerLog.logger,
    });
    const messages = await drainQueue(aws.sqs, queue.url, 2);
    const result = await consumer.handleMessages(messages, { queueArn: queue.arn });
    expect(result).toMatchObject({ processed: 0, failed: 2 });
    const failures = result.outcomes.map((o) => o.error);
    expect(failures.every((e) => e instanceof ContractViolationError)).toBe(true);
    // The consumer logged each failure with its error.
    expect(consumerLog.lines.filter((l) => l.level === 'error')).toHaveLength(2);
    const stored = await db.pool.query(
      `SELECT (SELECT json_agg(last_error) FROM outbox_events) AS last_errors,
              (SELECT json_agg(p) FROM processed_events p) AS processed`,
    );
    expect(JSON.stringify(stored.rows[0].last_errors)).toMatch(/no route/);

    expectNothingPersonal('the relay log', printed(relayLog.lines));
    expectNothingPersonal('the consumer log', printed(consumerLog.lines));
    expectNothingPersonal('the consumer result', printed(result));
    expectNothingPersonal('stored errors', printed(stored.rows[0]));
    // Still useful: the field, and which check failed.
    expect(failures.map((e) => e?.message).sort()).toEqual([
      'customer.registered v1: payload.customer.email: invalid_format (ends_with) (and payload.customer.name: invalid_format (regex))',
      'customer.renamed v1: payload.customer.email: regex (and payload.customer.name: regex)',
    ]);
  });

  it("the relay logs an event's aggregate id (an e-mail address here) only with logAggregateId", async () => {
    const queue = await createQueue(aws.sqs, uniqueName('security-relay-aggregate-id'));
    async function relayLog(options: { logAggregateId?: boolean }) {
      // Routed nowhere: dead-lettered at once, and logged with its fields.
      await produced.enqueue(db.pool, 'customer.registered', {
        aggregateId: EMAIL,
        payload: { customer: { email: 'a@b.example', name: 'A' } },
      });
      await db.pool.query(
        `UPDATE outbox_events SET event_type = 'account.unrouted' WHERE processed_at IS NULL`,
      );
      const { relay, log } = emulatorRelay(
        db.pool,
        aws,
        [{ match: 'customer.*', targets: [{ type: 'sqs', queueUrl: queue.url }] }],
        options,
      );
      expect(await drainUntilIdle(relay)).toMatchObject({ deadLettered: 1 });
      const dead = log.lines.filter((l) => l.message === 'event dead-lettered');
      expect(dead).toHaveLength(1);
      return printed(log.lines);
    }
    expect(await relayLog({})).not.toContain(EMAIL);
    expect(await relayLog({ logAggregateId: true })).toContain(EMAIL);
  });

  it("the consumer logs an event's aggregate id (an e-mail address here) only when asked: logAggregateId or OUTBOX_LOG_AGGREGATE_ID=true", async () => {
    // FIFO, as the relay sends to it: the group is `customer:<aggregate id>`.
    const queue = await createQueue(aws.sqs, `${uniqueName('security-aggregate-id')}.fifo`);
    /**
     * Sends two events of aggregate EMAIL and handles them (`fail`: the
     * handler throws, so the second is held back behind the first); returns
     * the log lines and the records' errors as printed.
     */
    async function logged(options: { logAggregateId?: boolean }, fail: boolean) {
      for (let i = 0; i < 2; i++) {
        const envelope = {
          id: crypto.randomUUID(),
          type: 'customer.registered',
          aggregateType: 'customer',
          aggregateId: EMAIL,
          occurredAt: new Date().toISOString(),
          payload: {},
          headers: {},
        };
        await aws.sqs.send(
          new SendMessageCommand({
            QueueUrl: queue.url,
            MessageBody: JSON.stringify(envelope),
            MessageGroupId: `customer:${EMAIL}`,
            MessageDeduplicationId: envelope.id,
          }),
        );
      }
      const log = captureLogger();
      const consumer = createConsumer({
        name: uniqueName('aggregate-id'),
        pool: db.pool,
        handlers: {
          'customer.registered': async () => {
            if (fail) throw new Error('the handler failed');
          },
        },
        logger: log.logger,
        ...options,
      });
      const messages = await drainQueue(aws.sqs, queue.url, 2);
      const first = await consumer.handleMessages(messages, { queueArn: queue.arn });
      expect(first.outcomes.map((o) => o.status)).toEqual(
        fail ? ['failed', 'blocked'] : ['processed', 'processed'],
      );
      // A redelivery: skipped as duplicates (logged at info) or failed again.
      const again = await consumer.handleMessages(messages, { queueArn: queue.arn });
      expect(log.lines.length).toBeGreaterThanOrEqual(3);
      return printed([log.lines, first.outcomes, again.outcomes]);
    }

    expectNothingPersonal('the consumer log (failed)', await logged({}, true));
    expectNothingPersonal('the consumer log (processed, duplicate)', await logged({}, false));
    expect(await logged({ logAggregateId: true }, true)).toContain(`aggregate_id: '${EMAIL}'`);
    process.env.OUTBOX_LOG_AGGREGATE_ID = 'true';
    expect(await logged({}, false)).toContain(`aggregate_id: '${EMAIL}'`);
    expectNothingPersonal('the consumer log (option wins)', await logged({ logAggregateId: false }, true));
    process.env.OUTBOX_LOG_AGGREGATE_ID = 'maybe';
    await expect(logged({}, false)).rejects.toMatchObject({ variable: 'OUTBOX_LOG_AGGREGATE_ID' });
  });
});
