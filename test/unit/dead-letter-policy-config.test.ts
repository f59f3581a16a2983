import { describe, expect, it } from 'vitest';
import { loadRelayConfig } from '../../lib/config/relay-config.js';
import { ConfigError } from '../../lib/errors.js';
import { resolveRelayOptions } from '../../lib/relay/options.js';

const routes = JSON.stringify([{ match: 'order.*', targets: [{ type: 'eventbridge', busName: 'bus' }] }]);

describe('OUTBOX_DEAD_LETTER_POLICY', () => {
  it('defaults to block; reads block and skip', () => {
    const unset = loadRelayConfig({ OUTBOX_ROUTES: routes, OUTBOX_ORDERING: 'aggregate' });
    expect(unset.relay.deadLetterPolicy).toBeUndefined();
    expect(resolveRelayOptions(unset.relay).deadLetterPolicy).toBe('block');
    for (const value of ['block', 'skip'] as const) {
      const config = loadRelayConfig({ OUTBOX_ROUTES: routes, OUTBOX_DEAD_LETTER_POLICY: value });
      expect(resolveRelayOptions(config.relay).deadLetterPolicy).toBe(value);
    }
  });

  it('a bad value names the variable', () => {
    const load = () => loadRelayConfig({ OUTBOX_ROUTES: routes, OUTBOX_DEAD_LETTER_POLICY: 'drop' });
    expect(load).toThrow(ConfigError);
    expect(load).toThrow(/OUTBOX_DEAD_LETTER_POLICY: expected "block" or "skip"/);
  });
});
