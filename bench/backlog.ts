import type pg from 'pg';

/**
 * The benchmarks' backlog: `count` pending events of 50 aggregates with
 * ~250-byte payloads, appended in statements of 50,000 rows.
 */
export async function insertBacklog(db: Pick<pg.Pool, 'query'>, count: number): Promise<void> {
  for (let start = 0; start < count; start += 50_000) {
    await db.query(
      `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
       SELECT gen_random_uuid(), 'order', 'order-' || (g % 50), 'order.created',
              jsonb_build_object('orderId', g, 'customerId', 'customer-' || (g % 997),
                                 'totalCents', g * 7 % 100000, 'currency', 'SEK',
                                 'note', repeat('x', 150))
       FROM generate_series($1::int, $2::int) g`,
      [start, Math.min(count, start + 50_000) - 1],
    );
  }
}
