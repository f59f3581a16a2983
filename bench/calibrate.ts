import { createHash, createHmac } from 'node:crypto';

/**
 * This machine's speed at the relay's kind of work, so that runs on
 * different days can be compared: the CPU milliseconds of a fixed loop of
 * what a relay does per message (an envelope built and parsed as JSON, its
 * SHA-256 and an HMAC, as SigV4 signs a request), median of five. The
 * machines these benchmarks run on share their cores with other guests: the
 * same code measured 2× slower on one afternoon than that morning, and only
 * ratios within one run, or figures scaled by this, compare across runs.
 */
export function calibrationMs(): number {
  const payload = {
    orderId: 12345,
    customerId: 'customer-42',
    totalCents: 4200,
    currency: 'SEK',
    note: 'x'.repeat(150),
  };
  const runs: number[] = [];
  for (let r = 0; r < 5; r++) {
    const before = process.cpuUsage();
    let sink = 0;
    for (let i = 0; i < 20_000; i++) {
      const text = JSON.stringify({ id: `event-${i}`, type: 'order.created', payload, headers: {} });
      sink += (JSON.parse(text) as { id: string }).id.length;
      sink += createHash('sha256').update(text).digest('hex').length;
      sink += createHmac('sha256', 'key').update(text).digest().length;
    }
    const used = process.cpuUsage(before);
    if (sink === 0) throw new Error('unreachable');
    runs.push((used.user + used.system) / 1000);
  }
  return Math.round(runs.sort((a, b) => a - b)[2] as number);
}
