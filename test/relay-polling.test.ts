import { describe, expect, it } from 'vitest';
import { NullPublisher } from '../lib/publish/null-publisher.js';
import type { WorkSignal } from '../lib/relay/notifier.js';
import { Relay } from '../lib/relay/relay.js';
import { useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';

const db = useTestDatabase();

describe('adaptive polling', () => {
  it('waits briefly after finding work and doubles the wait while polls find nothing', async () => {
    const waits: number[] = [];
    let inserted = false;
    const recording: WorkSignal = {
      async wait(ms) {
        waits.push(ms);
        // After the wait has grown to its longest, work arrives once.
        if (!inserted && waits.length === 6) {
          inserted = true;
          await insertEvents(db.pool, 3);
        }
      },
      close: async () => {},
    };
    const publisher = new NullPublisher();
    const relay = new Relay({
      db: db.pool,
      publisher,
      options: { workers: 1, safetyMarginMs: 0, idleWaitMinMs: 10, idleWaitMs: 80 },
      workSignal: recording,
    });
    const controller = new AbortController();
    const run = relay.run({ remainingMs: () => 60_000, abortSignal: controller.signal, skipStats: true });
    while (waits.length < 10) await new Promise((r) => setTimeout(r, 5));
    controller.abort();
    await run;

    expect(publisher.published).toBe(3);
    // Empty polls: 10, 20, 40, 80, 80, 80; then the claim that found the
    // 3 events; then the waits start short again.
    expect(waits.slice(0, 10)).toEqual([10, 20, 40, 80, 80, 80, 10, 20, 40, 80]);
  });
});
