/**
 * The deployed stack in ordered mode (`ordering: aggregate`: the relay
 * publishes to the SQS FIFO queue, one message group per aggregate) with
 * several relays at once: serverless.yml deployed into MiniStack with IAM
 * enforced, the relays run by MiniStack's Lambda executor on Node 22, started
 * by an asynchronous invoke, by producers' wakes and by each other (scale
 * out). Nothing here calls a handler in-process.
 *
 * Producers write a backlog in concurrent transactions that interleave on the
 * same aggregates, and go on writing while the relays drain it. While they
 * drain, the database is sampled: relay slots held, and whether any
 * aggregate is leased to two claims at once. Then the FIFO queue is read and
 * every aggregate's messages must come in commit order, each event once.
 */

import { randomUUID } from 'node:crypto';
import { LambdaClient } from '@aws-sdk/client-lambda';
import {
  DeleteMessageBatchCommand,
  type Message,
  ReceiveMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTransaction } from '../lib/db/transaction.js';
import { enqueueEvents } from '../lib/outbox/enqueue.js';
import { createRelayWaker } from '../lib/outbox/relay-waker.js';
import { PARKED_HOLDER } from '../lib/sql/relay-slots.js';
import { type StackEmulator, startStackEmulator } from '../scripts/local/aws-emulator.js';
import { node22PathDir } from '../scripts/local/node22.js';
import {
  type DeployedStack,
  deployStack,
  emulatorClientConfig,
  invokeFunction,
  jsonLines,
  LogTail,
} from '../scripts/local/stack.js';
import { useTestDatabase } from './support/database.js';

const MAX_RELAYS = 3;
/** Aggregates the producers write to; each gets well over one claim's run (50) of events. */
const AGGREGATES = 40;
/** Events written before the relay is woken: past the scale-out threshold (1,000 ready). */
const BACKLOG_EVENTS = 3_000;
/** Events per producer transaction, one per aggregate, all in one enqueue call. */
const PER_TRANSACTION = 3;
/** How long producers keep writing (and waking the relay) while the relays drain. */
const WRITE_WHILE_DRAINING_MS = 5_000;
const SAMPLE_EVERY_MS = 75;

const db = useTestDatabase({ poolSize: 14 });
let emulator: StackEmulator;
let stack: DeployedStack;

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until<T>(
  what: string,
  probe: () => Promise<T | undefined | false>,
  timeoutMs: number,
  everyMs = 500,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await pause(everyMs);
  }
}

beforeAll(async () => {
  emulator = await startStackEmulator({ auth: true, nodeDir: node22PathDir() });
  // A stage of its own: its packaging folder (.local/stack-<stage>) cannot
  // race with another file's deploy of the local stage. The local stage's
  // emulator settings are passed as params instead (a param cannot be empty:
  // the local stage's extraCaCerts '' becomes the host's CA bundle, unused
  // with TLS off).
  stack = await deployStack({
    endpoint: emulator.endpoint,
    databaseUrl: db.url,
    stage: 'ordered',
    params: {
      databaseSslMode: 'disable',
      extraCaCerts: '/etc/ssl/certs/ca-certificates.crt',
      emulatorIamCompat: 'true',
      maxAttempts: '5',
      maxReceiveCount: '2',
      consumerVisibilityTimeout: '5',
      ordering: 'aggregate',
      maxRelays: String(MAX_RELAYS),
    },
  });
  // The producers' own record of commit order (see `produce`).
  await db.pool.query(`
    CREATE TABLE witness_versions (aggregate_id text PRIMARY KEY, v integer NOT NULL DEFAULT 0);
    CREATE TABLE witness_commits (
      event_id uuid PRIMARY KEY,
      aggregate_id text NOT NULL,
      v integer NOT NULL,
      began integer NOT NULL
    )`);
}, 240_000);

afterAll(async () => {
  await emulator?.stop();
  // No Lambda worker outlived the emulator holding a session on our database.
  const { rows } = await db.pool.query(
    `SELECT pid, application_name FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name LIKE 'pg-lambda-outbox-%'`,
  );
  expect(rows).toEqual([]);
}, 60_000);

/** Order events (the reference stack routes `order.*` to the FIFO queue and the bus). */
const aggregateIds = Array.from({ length: AGGREGATES }, () => randomUUID()).sort();
let began = 0;

/**
 * One producer transaction: an event for each of `aggregates`, in one
 * enqueue call, as a service writes them. The short pauses let concurrent
 * transactions overlap, so transactions on one aggregate often commit in
 * another order than they began.
 *
 * After the enqueue, in the same transaction, each aggregate's witness row
 * is bumped: its row lock is held until commit, so per aggregate the witness
 * numbers count transactions in commit order, whatever order their events'
 * `seq` were drawn in. That is the order the FIFO queue must show.
 */
async function produce(aggregates: string[]): Promise<void> {
  const ticket = ++began;
  await withTransaction(db.pool, async (client) => {
    await pause(Math.random() * 3);
    const ids = await enqueueEvents(
      client,
      aggregates.map((id) => ({
        aggregateType: 'order',
        aggregateId: id,
        eventType: 'order.created',
        payload: { orderId: id, customerId: `customer-${ticket}`, totalCents: ticket, currency: 'SEK' },
      })),
    );
    await pause(Math.random() * 3);
    await client.query(
      `WITH bumped AS (
         UPDATE witness_versions w SET v = w.v + 1
         WHERE w.aggregate_id = ANY($1::text[])
         RETURNING w.aggregate_id, w.v)
       INSERT INTO witness_commits (event_id, aggregate_id, v, began)
       SELECT e.id, e.aggregate_id, b.v, $3
       FROM unnest($1::text[], $2::uuid[]) AS e(aggregate_id, id)
       JOIN bumped b USING (aggregate_id)`,
      [aggregates, ids, ticket],
    );
  });
}

/** `PER_TRANSACTION` distinct aggregates, picked at random, sorted. */
function pickAggregates(): string[] {
  const picked = new Set<string>();
  while (picked.size < PER_TRANSACTION)
    picked.add(aggregateIds[Math.floor(Math.random() * AGGREGATES)] as string);
  return [...picked].sort();
}

/** One database snapshot while the relays drain. */
interface Sample {
  held: number;
  leases: number;
  leasedAggregates: Array<{ aggregate_id: string; lease: string }>;
  shared: Array<{ aggregate_id: string; leases: string[] }>;
  outOfOrder: Array<{ aggregate_id: string; seq: number }>;
  left: number;
}

/**
 * Samples, in one statement (one snapshot): the relay slots held; the live
 * leases; aggregates whose unfinished rows are leased to more than one claim;
 * and leased rows that are not in their aggregate's leased prefix, i.e. with
 * an earlier unfinished row of the aggregate not leased to the same claim (a
 * claim that took the middle of an aggregate, or a second relay past the
 * first one's rows). One pass over the unfinished rows, a few milliseconds.
 */
async function sample(): Promise<Sample> {
  const { rows } = await db.pool.query(`
    WITH unfinished AS (
      SELECT aggregate_type, aggregate_id, seq, locked_by, coalesce(locked_until > now(), false) AS live
      FROM outbox_events WHERE processed_at IS NULL AND dead_lettered_at IS NULL
    ),
    heads AS (
      SELECT u.*, first_value(CASE WHEN u.live THEN u.locked_by END)
               OVER (PARTITION BY u.aggregate_type, u.aggregate_id ORDER BY u.seq) AS head_lease
      FROM unfinished u
    ),
    marked AS (
      SELECT h.*, count(*) FILTER (WHERE NOT (h.live AND h.locked_by IS NOT DISTINCT FROM h.head_lease))
               OVER (PARTITION BY h.aggregate_type, h.aggregate_id ORDER BY h.seq) AS breaks
      FROM heads h
    ),
    leased AS (SELECT * FROM marked WHERE live)
    SELECT
      (SELECT count(*)::int FROM outbox_relay_slots WHERE held_until > now() AND holder <> '${PARKED_HOLDER}') AS held,
      (SELECT count(DISTINCT locked_by)::int FROM leased) AS leases,
      (SELECT coalesce(json_agg(DISTINCT jsonb_build_object('aggregate_id', aggregate_id, 'lease', locked_by)), '[]')
         FROM leased) AS "leasedAggregates",
      (SELECT coalesce(json_agg(x), '[]') FROM (
         SELECT aggregate_id, array_agg(DISTINCT locked_by) AS leases FROM leased
         GROUP BY aggregate_type, aggregate_id HAVING count(DISTINCT locked_by) > 1) x) AS shared,
      (SELECT coalesce(json_agg(x), '[]') FROM (
         SELECT aggregate_id, seq FROM leased WHERE breaks > 0 ORDER BY seq LIMIT 20) x) AS "outOfOrder",
      (SELECT count(*)::int FROM unfinished) AS left`);
  return rows[0] as Sample;
}

/**
 * Reads the FIFO queue as the deployer until `count` messages came, deleting
 * each batch as it arrives (a group releases its next message only then),
 * then once more: anything after that is a message too many.
 */
async function readFifo(queueUrl: string, count: number, timeoutMs: number) {
  const sqs = new SQSClient(emulatorClientConfig(stack.endpoint));
  const received: Message[] = [];
  const receive = async (waitSeconds: number) => {
    const { Messages = [] } = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: waitSeconds,
        VisibilityTimeout: 60,
        MessageSystemAttributeNames: ['All'],
      }),
    );
    if (Messages.length > 0) {
      await sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: Messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
        }),
      );
    }
    return Messages;
  };
  const deadline = Date.now() + timeoutMs;
  while (received.length < count && Date.now() < deadline) {
    const batch = await receive(0);
    received.push(...batch);
    if (batch.length === 0) await pause(200);
  }
  const extra = await receive(1);
  return { received, extra };
}

describe('ordered mode with several relays (ordering aggregate, SQS FIFO, maxRelays 3)', () => {
  it('relays scaled out never hold one aggregate at once, and each aggregate reaches the FIFO queue in commit order', async () => {
    await db.pool.query('INSERT INTO witness_versions (aggregate_id) SELECT unnest($1::text[])', [
      aggregateIds,
    ]);

    const logsFrom = Date.now();
    // While the backlog is written every slot is held, as by relays busy
    // elsewhere: a scheduled run that came now would keep up with the
    // producers and leave no backlog to scale out for. It returns at once.
    await db.pool.query(
      `INSERT INTO outbox_relay_slots
       SELECT n, gen_random_uuid(), now() + interval '5 minutes' FROM generate_series(0, $1::int - 1) n`,
      [MAX_RELAYS],
    );
    // The backlog: eight producers at once, three aggregates per transaction.
    let written = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (written < BACKLOG_EVENTS) {
          written += PER_TRANSACTION;
          await produce(pickAggregates());
        }
      }),
    );
    await db.pool.query('DELETE FROM outbox_relay_slots');

    const since = Date.now();
    await invokeFunction(stack, 'relay', { source: 'pg-lambda-outbox.wake' }, 'Event');

    // Producers keep writing to the same aggregates while the relays drain,
    // and wake the relay after their commits as a service would (a woken run
    // finds every slot held, or takes a free one).
    const waker = createRelayWaker({
      functionName: stack.functionName('relay'),
      lambda: new LambdaClient({ ...emulatorClientConfig(stack.endpoint), maxAttempts: 1 }),
    });
    let writing = true;
    const producers = Promise.all(
      Array.from({ length: 4 }, async () => {
        const stopAt = Date.now() + WRITE_WHILE_DRAINING_MS;
        while (Date.now() < stopAt) {
          await produce(pickAggregates());
          await waker.wake();
          await pause(20);
        }
      }),
    ).finally(() => {
      writing = false;
    });

    const samples: Sample[] = [];
    const sampledAt: number[] = [];
    const drained = until(
      'the outbox drained',
      async () => {
        const s = await sample();
        samples.push(s);
        sampledAt.push(Date.now());
        return !writing && s.left === 0;
      },
      150_000,
      SAMPLE_EVERY_MS,
    );
    await producers;
    await drained;
    const drainMs = Date.now() - since;

    const { rows: events } = await db.pool.query(
      `SELECT e.id, e.aggregate_id, e.seq, e.processed_at, e.dead_lettered_at, w.v, w.began
         FROM outbox_events e JOIN witness_commits w ON w.event_id = e.id
        ORDER BY e.aggregate_id, e.seq`,
    );
    const { rows: counted } = await db.pool.query('SELECT count(*)::int AS n FROM outbox_events');
    const total = counted[0].n as number;
    // Every event has its witness row (no event without a commit record, none lost).
    expect(events).toHaveLength(total);
    expect(total).toBeGreaterThanOrEqual(BACKLOG_EVENTS + 100);
    // Every event published, none dead-lettered.
    expect(events.filter((e) => e.processed_at === null || e.dead_lettered_at !== null)).toEqual([]);

    // Per aggregate, in the database: seq order is the order the
    // transactions committed in (the witness numbers 1, 2, 3, ...).
    const bySeq = new Map<string, typeof events>();
    for (const e of events) bySeq.set(e.aggregate_id, [...(bySeq.get(e.aggregate_id) ?? []), e]);
    expect(bySeq.size).toBe(AGGREGATES);
    let inversions = 0;
    const notCommitOrder: Array<{ aggregate: string; position: number; commit: number }> = [];
    for (const [aggregate, list] of bySeq) {
      const at = list.findIndex((e, i) => e.v !== i + 1);
      if (at >= 0) notCommitOrder.push({ aggregate, position: at + 1, commit: list[at].v });
      for (let i = 1; i < list.length; i++) if (list[i].began < list[i - 1].began) inversions++;
    }
    expect(notCommitOrder).toEqual([]);
    // The producers did interleave: some transactions committed after one
    // that began later, so begin order would have been the wrong order.
    expect(inversions).toBeGreaterThan(0);

    // What the sampling saw while the relays drained. It ran throughout.
    expect(samples.length).toBeGreaterThanOrEqual(50);
    const mostHeld = Math.max(...samples.map((s) => s.held));
    expect(mostHeld).toBeGreaterThanOrEqual(2);
    expect(mostHeld).toBeLessThanOrEqual(MAX_RELAYS);
    // Claims of several relays were in flight at once (a relay's two workers
    // hold at most two), so the checks below could fail...
    expect(Math.max(...samples.map((s) => s.leases))).toBeGreaterThanOrEqual(3);
    // ... and aggregates went from one claim to another (runs of 50 at most per claim).
    const leasesPerAggregate = new Map<string, Set<string>>();
    for (const s of samples)
      for (const { aggregate_id, lease } of s.leasedAggregates)
        leasesPerAggregate.set(aggregate_id, (leasesPerAggregate.get(aggregate_id) ?? new Set()).add(lease));
    expect([...leasesPerAggregate.values()].filter((l) => l.size >= 2).length).toBeGreaterThan(0);
    // Never one aggregate leased to two claims at once, never a claim past an
    // earlier unfinished event of its aggregate that it does not hold.
    expect(samples.flatMap((s) => s.shared)).toEqual([]);
    expect(samples.flatMap((s) => s.outOfOrder)).toEqual([]);

    // The FIFO queue (nothing in the stack consumes it): per message group,
    // the aggregate's events in commit order, each exactly once.
    const { received, extra } = await readFifo(stack.outputs.OutboxFifoQueueUrl as string, total, 90_000);
    expect(extra).toEqual([]);
    expect(received).toHaveLength(total);
    const seqOf = new Map(events.map((e) => [e.id as string, String(e.seq)]));
    const byGroup = new Map<string, string[]>();
    for (const m of received) {
      const body = JSON.parse(m.Body as string);
      expect(m.Attributes?.MessageDeduplicationId).toBe(body.id);
      const group = m.Attributes?.MessageGroupId as string;
      expect(group).toBe(`order:${body.aggregateId}`);
      byGroup.set(group, [...(byGroup.get(group) ?? []), body.id]);
    }
    expect(byGroup.size).toBe(AGGREGATES);
    // Per group, in commit order (the witness numbers): the first message out
    // of place, its position, and the seq expected there against the seq received.
    const misplaced: Array<{ group: string; position: number; expected?: string; received?: string }> = [];
    for (const [aggregateId, rows] of bySeq) {
      const list = [...rows].sort((a, b) => a.v - b.v);
      const group = `order:${aggregateId}`;
      const got = byGroup.get(group) ?? [];
      const at = list.findIndex((e, i) => e.id !== got[i]);
      if (at >= 0 || got.length !== list.length) {
        const position = at >= 0 ? at : list.length;
        const receivedId = got[position];
        misplaced.push({
          group,
          position: position + 1,
          expected: list[position] ? String(list[position].seq) : undefined,
          received: receivedId === undefined ? undefined : (seqOf.get(receivedId) ?? `unknown ${receivedId}`),
        });
      }
    }
    expect(misplaced).toEqual([]);

    // The relays' own account: one started others for the backlog; every
    // run held a slot of 0 .. MAX_RELAYS - 1; several runs published; their
    // counts add up to every event once, with no lease lost.
    const tail = new LogTail(stack, 'relay', logsFrom);
    const lines: Array<Record<string, unknown>> = [];
    const runs = await until(
      'every published event in the relay runs logged',
      async () => {
        lines.push(...jsonLines(await tail.poll()));
        const finished = lines.filter((l) => l.message === 'relay run finished');
        const published = finished.reduce((n, r) => n + Number(r.published ?? 0), 0);
        return published >= total ? finished : undefined;
      },
      // A run logs when it returns: one that drains to its budget (65 s) logs that late.
      150_000,
    );
    expect(lines.some((l) => l.message === 'backlog: started more relays')).toBe(true);
    const working = runs.filter((r) => Number(r.published) > 0);
    expect(working.length).toBeGreaterThanOrEqual(2);
    expect(working.every((r) => typeof r.slot === 'number' && r.slot >= 0 && r.slot < MAX_RELAYS)).toBe(true);
    expect(runs.reduce((n, r) => n + Number(r.published ?? 0), 0)).toBe(total);
    expect(runs.reduce((n, r) => n + Number(r.leaseLost ?? 0), 0)).toBe(0);
    console.info(
      `ordered scale-out: ${total} events, ${AGGREGATES} aggregates, ${samples.length} samples ` +
        `(longest gap ${Math.max(...sampledAt.slice(1).map((t, i) => t - (sampledAt[i] as number)))} ms), ` +
        `most slots held ${mostHeld}, most leases ${Math.max(...samples.map((s) => s.leases))}, ` +
        `${runs.length} runs (${working.length} published, ${runs.filter((r) => r.stoppedBecause === 'busy').length} busy), ` +
        `${waker.invocations} wakes, ${inversions} begin/commit inversions, drained in ${drainMs} ms`,
    );
  }, 300_000);
});
