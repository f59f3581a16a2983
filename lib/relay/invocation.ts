/** The payload `createRelayWaker` sends: a producer committed events and wants them out now. */
export const WAKE_SOURCE = 'pg-lambda-outbox.wake';

/** The payload of a relay started by another for a backlog (scale out, `OUTBOX_MAX_RELAYS`). */
export const SCALE_OUT_SOURCE = 'pg-lambda-outbox.scale-out';

/**
 * Whether a relay invocation was started by a producer's wake
 * (`createRelayWaker`). A woken run keeps its idle tail from the start, for
 * the events that follow the one it was woken for, as does a run started
 * for a backlog (`isScaleOutEvent`); the schedule's tick (the safety net)
 * returns at once when its first claim finds nothing
 * (`RunOptions.leaveIfEmpty`).
 */
export function isWakeEvent(event: unknown): boolean {
  return hasSource(event, WAKE_SOURCE);
}

/** Whether a relay invocation was started by another relay for a backlog (scale out). */
export function isScaleOutEvent(event: unknown): boolean {
  return hasSource(event, SCALE_OUT_SOURCE);
}

function hasSource(event: unknown, source: string): boolean {
  return typeof event === 'object' && event !== null && (event as { source?: unknown }).source === source;
}
