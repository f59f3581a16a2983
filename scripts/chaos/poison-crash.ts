import type { Publisher } from '../../lib/publish/types.js';

/** The payload key that marks an event whose publication kills the relay process. */
export const CRASH_MARKER = 'chaosCrash';

/**
 * Chaos machinery, not the product: a publisher that, handed a batch holding
 * an event marked {@link CRASH_MARKER}, starts publishing the rest of the
 * batch and kills its own process a moment later (SIGKILL, as an
 * out-of-memory kill or a segfault would), before recording any outcome.
 * The relay must end with only that event in dead letters: its neighbours
 * lost their lease without an outcome and are retried alone, and only a row
 * that kills the relay while held alone spends attempts. `report` is told
 * which event and neighbours were in the batch, just before the kill.
 */
export function crashOnPoison(
  publisher: Publisher,
  report: (poisonId: string, neighbours: string[]) => Promise<void>,
): Publisher {
  const marker = `"${CRASH_MARKER}"`;
  return {
    async publish(events, context) {
      const poison = events.find((e) => e.payloadJson.includes(marker));
      if (!poison) return publisher.publish(events, context);
      // Another poison in the same batch (both redriven together) must not
      // be published by the crashing relay either: it is no neighbour.
      const rest = events.filter((e) => !e.payloadJson.includes(marker));
      const inFlight = rest.length > 0 ? publisher.publish(rest, context).catch(() => []) : undefined;
      await report(
        poison.id,
        rest.map((e) => e.id),
      );
      await Promise.race([inFlight, new Promise((resolve) => setTimeout(resolve, 30))]);
      process.kill(process.pid, 'SIGKILL');
      return new Promise(() => {});
    },
    takeRecoveredTargets: publisher.takeRecoveredTargets?.bind(publisher),
  };
}
