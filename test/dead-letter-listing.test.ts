// The dead-letter listing reads dead letters, not the table: when the dead
// letters are the newest rows (a target that just broke), the first page
// comes from outbox_events_dead_letters_by_seq, and no published row is read
// and filtered out on the way (without that index, 990,000 of them at
// 1,000,000 events: 400 ms a page).
import { describe, expect, it } from 'vitest';
import { listDeadLetters } from '../lib/sql/list-dead-letters.js';
import { useTestDatabase } from './support/database.js';

const db = useTestDatabase();

describe('listing dead letters behind a long published history', () => {
  it('pages them oldest first through their own index, reading no published row', async () => {
    await db.pool.query(`
      INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, processed_at, first_processed_at, attempts)
      SELECT gen_random_uuid(), 'order', 'o-' || (g % 5000), 'order.created', '{}', now(), now(), 1
      FROM generate_series(1, 100000) g;
      INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, dead_lettered_at, attempts, last_error)
      SELECT gen_random_uuid(), 'order', 'o-' || g, 'order.' || (g % 2), '{}', now(), 5, 'boom'
      FROM generate_series(1, 200) g;
      ANALYZE outbox_events;`);

    const page = await listDeadLetters(db.pool, { limit: 50 });
    expect(page.total).toBe(200);
    expect(page.rows.map((r) => Number(r.seq))).toEqual(
      [...page.rows.map((r) => Number(r.seq))].sort((a, b) => a - b),
    );
    expect(page.rows[0]?.aggregateId).toBe('o-1');

    const { rows } = await db.pool.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
       SELECT id FROM outbox_dead_letters WHERE ($1::text IS NULL OR event_type = $1::text) ORDER BY seq LIMIT 50`,
      [null],
    );
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(plan).toContain('outbox_events_dead_letters_by_seq');
    expect(plan).not.toMatch(/Rows Removed by Filter: [1-9]/);
  });
});
