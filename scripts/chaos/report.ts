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
    ['consumer_lost', (r) => r.consumer_lost, true],
    ['handled_twice', (r) => r.handled_twice, true],
    ['consumer_order_violations', (r) => r.consumer.consumer_order_violations, true],
    ['replays_not_handled (events replayed)', (r) => `${r.replays.not_handled} (${r.replays.events})`, true],
    [
      'payload_mismatch (large payloads handled)',
      (r) => `${r.large_payloads.payload_mismatch} (${r.large_payloads.handled})`,
      true,
    ],
    ['non_poison_dead_letters', (r) => r.non_poison_dead_letters, true],
    [
      'poison_not_dead_lettered (poison: no route / crash)',
      (r) => `${r.poison.not_dead_lettered} (${r.poison.committed.no_route} / ${r.poison.committed.crash})`,
      true,
    ],
    [
      'poison relay crashes (neighbours failed / in batch)',
      (r) => `${r.poison.relay_crashes} (${r.poison.crash_neighbours_failed} / ${r.poison.crash_neighbours})`,
    ],
    ['poison redriven during the run', (r) => r.poison.redriven_during_run],
    ['duplicates (redeliveries)', (r) => `${r.duplicates} (${r.redeliveries})`],
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
    ['faults: consumer_kill', (r) => r.faults.consumer_kill],
    ['faults: replay (aggregates)', (r) => `${r.faults.replay} (${r.replays.runs})`],
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
