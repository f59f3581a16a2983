// Compile-time promises of the event contracts, for zod and valibot. The
// `@ts-expect-error` lines are checked by `npm run typecheck` (tsc fails on
// an expected error that does not occur), the expectTypeOf lines by tsc too;
// the calls never run against a database (they sit in functions not called).
import type { ClientBase } from 'pg';
import * as v from 'valibot';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../lib/contracts/define.js';
import type { Queryable } from '../lib/db/queryable.js';

const events = defineEvents({
  'order.created': {
    schema: z.object({ orderId: z.uuid(), totalCents: z.int(), note: z.string().optional() }),
    aggregateType: 'order',
    version: 2,
    previous: { 1: z.object({ orderId: z.uuid(), total: z.number() }) },
  },
  'order.cancelled': v.object({ orderId: v.string(), reason: v.optional(v.string()) }),
});

declare const db: Queryable;

describe('event contracts, at compile time', () => {
  it('a right payload compiles, a wrong one does not (zod)', () => {
    const writes = () => {
      void events.enqueue(db, 'order.created', {
        aggregateId: 'o-1',
        payload: { orderId: 'x', totalCents: 1 },
      });
      void events.enqueue(db, 'order.created', {
        aggregateId: 'o-1',
        // @ts-expect-error a misspelt field is a compile error
        payload: { orderId: 'x', totalCent: 1 },
      });
      void events.enqueue(db, 'order.created', {
        aggregateId: 'o-1',
        // @ts-expect-error a field of the wrong type is a compile error
        payload: { orderId: 'x', totalCents: '1' },
      });
      // @ts-expect-error an event type without a contract is a compile error
      void events.enqueue(db, 'order.shipped', { aggregateId: 'o-1', payload: {} });
    };
    expectTypeOf(writes).toBeFunction();
  });

  it('a right payload compiles, a wrong one does not (valibot)', () => {
    const writes = () => {
      void events.enqueue(db, 'order.cancelled', {
        aggregateId: 'o-1',
        aggregateType: 'order',
        payload: { orderId: 'x', reason: 'customer' },
      });
      // @ts-expect-error orderId is required
      void events.enqueue(db, 'order.cancelled', { aggregateId: 'o-1', payload: { reason: 'customer' } });
      void events.enqueueMany(db, [
        { type: 'order.cancelled', aggregateId: 'o-1', payload: { orderId: 'x' } },
        { type: 'order.created', aggregateId: 'o-2', payload: { orderId: 'y', totalCents: 3 } },
        // @ts-expect-error the payload of another event type
        { type: 'order.cancelled', aggregateId: 'o-3', payload: { orderId: 'y', totalCents: 3 } },
      ]);
    };
    expectTypeOf(writes).toBeFunction();
  });

  it('handlers get the payload of each accepted version, told apart by event.version', () => {
    const handlers = events.handlers({
      'order.created': async (event, tx) => {
        expectTypeOf(tx).toEqualTypeOf<ClientBase>();
        expectTypeOf(event.version).toEqualTypeOf<1 | 2>();
        if (event.version === 2) {
          expectTypeOf(event.payload).toEqualTypeOf<{
            orderId: string;
            totalCents: number;
            note?: string | undefined;
          }>();
        } else {
          expectTypeOf(event.payload).toEqualTypeOf<{ orderId: string; total: number }>();
          // @ts-expect-error version 1 had no totalCents
          void event.payload.totalCents;
        }
      },
      'order.cancelled': (event) => {
        expectTypeOf(event.version).toEqualTypeOf<1>();
        expectTypeOf(event.payload.reason).toEqualTypeOf<string | undefined>();
      },
    });
    expectTypeOf(handlers).toBeObject();
    // A handler for an event type without a contract: a compile error, and at run time a ConfigError.
    expect(() =>
      // @ts-expect-error no contract for order.shipped
      events.handlers({ 'order.shipped': async () => {} }),
    ).toThrow(/handlers\.order\.shipped/);
  });
});
