import { describe, expect, it } from 'vitest';
import type { OutboxEvent } from '../../lib/outbox/types.js';
import { sendOrdered } from '../../lib/publish/batching.js';
import { RoutingPublisher } from '../../lib/publish/router.js';
import { RouteTable } from '../../lib/publish/routes.js';
import type { TargetResult, Transport } from '../../lib/publish/types.js';

const event = (aggregateId: string, k: number, eventType = 'order.updated'): OutboxEvent =>
  ({
    id: `${aggregateId}${k}`,
    seq: '0',
    aggregateType: 'order',
    aggregateId,
    eventType,
    payload: {},
    payloadJson: '{}',
    headers: {},
    createdAt: new Date(0),
    attempts: 1,
    deliveredTargets: [],
  }) as OutboxEvent;

const item = (e: OutboxEvent, bytes = 10) => ({ event: e, bytes });

/** A fake target: records calls, accepts every entry except those `refuse` names. */
function target(refuse: (id: string) => boolean = () => false) {
  const calls: string[][] = [];
  const results = new Map<string, TargetResult>();
  const call = async (batch: Array<{ event: OutboxEvent }>) => {
    calls.push(batch.map((p) => p.event.id));
    await new Promise((resolve) => setTimeout(resolve, 1));
    for (const p of batch) {
      results.set(
        p.event.id,
        refuse(p.event.id)
          ? { ok: false, retryable: true, environment: false, code: 'InternalError', error: 'refused' }
          : { ok: true },
      );
    }
  };
  return { calls, results, call };
}

describe('sendOrdered', () => {
  it('FIFO: a run shares a call, at most perCall entries, later entries in later rounds; aggregates share calls', async () => {
    const t = target();
    const items = [
      ...Array.from({ length: 12 }, (_, k) => item(event('h', k))),
      item(event('a', 0)),
      item(event('b', 0)),
    ];
    await sendOrdered(items, { perCall: 10, maxEntries: 10, maxBytes: 1_000 }, 'SQS', t.results, t.call);
    expect(t.calls).toEqual([
      ['h0', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'h7', 'h8', 'h9'],
      ['a0', 'b0'],
      ['h10', 'h11'],
    ]);
    expect([...t.results.values()].every((r) => r.ok)).toBe(true);
  });

  it('one per aggregate per call (EventBridge): a run goes one event per round', async () => {
    const t = target();
    const items = [item(event('h', 0)), item(event('h', 1)), item(event('a', 0)), item(event('h', 2))];
    await sendOrdered(
      items,
      { perCall: 1, maxEntries: 10, maxBytes: 1_000 },
      'EventBridge',
      t.results,
      t.call,
    );
    expect(t.calls).toEqual([['h0', 'a0'], ['h1'], ['h2']]);
  });

  it('a refused entry stops its aggregate: accepted ones after it in the call and unsent ones are held back', async () => {
    const t = target((id) => id === 'h3');
    const items = [...Array.from({ length: 15 }, (_, k) => item(event('h', k))), item(event('a', 0))];
    await sendOrdered(items, { perCall: 10, maxEntries: 10, maxBytes: 1_000 }, 'SQS', t.results, t.call);
    expect(t.calls).toHaveLength(2); // h0..h9, then a0; h10.. never sent
    const code = (id: string) => {
      const r = t.results.get(id);
      return r?.ok ? 'ok' : r?.code;
    };
    expect(['h0', 'h1', 'h2', 'h3', 'h4', 'h9', 'h10', 'h14', 'a0'].map(code)).toEqual([
      'ok',
      'ok',
      'ok',
      'InternalError',
      'AcceptedAfterFailure',
      'AcceptedAfterFailure',
      'HeldBack',
      'HeldBack',
      'ok',
    ]);
    expect(t.results.get('h10')).toMatchObject({
      ok: false,
      heldBack: true,
      environment: true,
      retryable: true,
    });
  });

  it('a call refused as a whole for one entry is retried one entry per call, each aggregate in order', async () => {
    const calls: string[][] = [];
    const results = new Map<string, TargetResult>();
    const call = async (batch: Array<{ event: OutboxEvent }>) => {
      calls.push(batch.map((p) => p.event.id));
      if (batch.some((p) => p.event.id === 'h1')) {
        throw Object.assign(new Error('bad entry'), { name: 'InvalidParameterValue', $fault: 'client' });
      }
      for (const p of batch) results.set(p.event.id, { ok: true });
    };
    const items = [item(event('h', 0)), item(event('h', 1)), item(event('h', 2)), item(event('a', 0))];
    await sendOrdered(items, { perCall: 10, maxEntries: 10, maxBytes: 1_000 }, 'SQS', results, call);
    expect(calls).toEqual([['h0', 'h1', 'h2', 'a0'], ['h0'], ['a0'], ['h1']]);
    expect(results.get('h0')?.ok).toBe(true);
    expect(results.get('a0')?.ok).toBe(true);
    expect(results.get('h1')).toMatchObject({ ok: false, retryable: false });
    expect(results.get('h2')).toMatchObject({ ok: false, heldBack: true });
  });
});

describe('RoutingPublisher, ordered', () => {
  const routes = new RouteTable([{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: 'q.fifo' }] }]);
  const recording = (): Transport & { sent: string[] } => {
    const sent: string[] = [];
    return {
      key: 'sqs:q.fifo',
      sent,
      async send(events) {
        sent.push(...events.map((e) => e.id));
        return new Map(events.map((e) => [e.id, { ok: true } as TargetResult]));
      },
    };
  };

  it('an event with no route stops its aggregate; events before it and other aggregates go', async () => {
    const transport = recording();
    const publisher = new RoutingPublisher(routes, [transport]);
    const events = [event('h', 0), event('h', 1, 'invoice.unroutable'), event('h', 2), event('a', 0)];
    const outcomes = await publisher.publish(events, { ordered: true });
    expect(transport.sent).toEqual(['h0', 'a0']);
    expect(outcomes.map((o) => (o.ok ? 'ok' : o.code))).toEqual(['ok', 'NoRoute', 'HeldBack', 'ok']);
    // Unordered, h2 goes.
    const unordered = recording();
    await new RoutingPublisher(routes, [unordered]).publish(events);
    expect(unordered.sent).toEqual(['h0', 'h2', 'a0']);
  });
});
