import type { ModeResult } from './scenario.js';

const fmt = (v: unknown) =>
  v === null || v === undefined ? '–' : typeof v === 'number' ? v.toLocaleString('en-US') : String(v);

/** The figures of each mode side by side, one row per figure; failing checks marked. */
export function resultTable(results: readonly ModeResult[]): string {
  const rows: Array<[string, (r: ModeResult) => unknown, boolean?]> = [
    ['events committed', (r) => r.events_committed],
    [
      'events rolled back (thrown / swallowed / blocked pair)',
      (r) =>
        `${r.events_rolled_back} (${r.producer.thrown} / ${r.producer.swallowed} / ${r.producer.interleave_blocked} tx)`,
    ],
    ['messages received (relay queue / bus queue)', (r) => `${r.received.queue} / ${r.received.bus_queue}`],
    ['lost', (r) => r.lost, true],
    ['rolled_back_seen', (r) => r.rolled_back_seen, true],
    ['rolled_back_stored', (r) => r.rolled_back_stored, true],
    ['stuck', (r) => r.stuck, true],
    [
      'order_violations (interleaved pairs)',
      (r) =>
        r.order_violations === null ? null : `${r.order_violations} (${r.order_violations_interleaved})`,
      true,
    ],
    ['duplicates', (r) => r.duplicates],
    ['dead_letters (left after final redrive)', (r) => `${r.dead_letters} (${r.dead_letters_left})`],
    ['drain_s_after_faults', (r) => r.drain_s_after_faults ?? 'did not drain'],
    ['faults: relay_kill', (r) => r.faults.relay_kill],
    ['faults: db_terminate', (r) => r.faults.db_terminate],
    ['faults: emulator_pause', (r) => r.faults.emulator_pause],
    [
      'faults: target_refuse / target_blackhole',
      (r) => `${r.faults.target_refuse} / ${r.faults.target_blackhole}`,
    ],
    ['faults: redrive (events reset)', (r) => `${r.faults.redrive} (${r.redriven_during_faults})`],
    [
      'relay invocations (errors / over budget)',
      (r) => `${r.relays.invocations} (${r.relays.invocation_errors} / ${r.relays.invocations_over_budget})`,
    ],
    ['relay crashes', (r) => r.relays.crashes],
    [
      'EventBridge connections refused / black-holed',
      (r) => `${r.eventbridge_connections.refused} / ${r.eventbridge_connections.blackholed}`,
    ],
  ];
  const header = ['figure', ...results.map((r) => `${r.mode}${r.passed ? '' : ' (FAILED)'}`)];
  const body = rows.map(([name, get, check]) => [
    name,
    ...results.map((r) => {
      const value = get(r);
      const bad =
        check && typeof value === 'number'
          ? value > 0
          : check && typeof value === 'string' && !value.startsWith('0');
      return `${fmt(value)}${bad ? ' ✗' : ''}`;
    }),
  ]);
  const widths = header.map((_, i) => Math.max(...[header, ...body].map((row) => String(row[i]).length)));
  const line = (row: string[]) =>
    row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}
