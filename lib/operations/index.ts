/**
 * `pg-lambda-outbox/operations`: what operators run against the outbox:
 * redrive or discard dead letters, list them, read the outbox's status, and
 * delete rows past their retention. Each takes the outbox's `schema`
 * (default: `OUTBOX_SCHEMA`, else the connection's `search_path`); the
 * `createOutbox({ schema })` handle of the main entry point runs them all in
 * its schema.
 */

export { DEFAULT_REDRIVE_LIMIT, MAX_REDRIVE_LIMIT } from '../outbox/limits.js';
export {
  DEAD_LETTER_COUNT_CAP,
  type DeadLetter,
  type DeadLetterPage,
  type ListDeadLettersOptions,
} from '../sql/list-dead-letters.js';
export type { OutboxStats } from '../sql/outbox-stats.js';
export type { ReplayRecord } from '../sql/replay-events.js';
export {
  type CleanupDeps,
  type CleanupOptions,
  type CleanupReport,
  type CleanupRunOptions,
  type CleanupTableReport,
  resolveCleanupOptions,
  runCleanup,
} from './cleanup.js';
export { loadCleanupConfig } from './cleanup-config.js';
export { listDeadLetters, listReplays, outboxStats } from './reads.js';
export {
  parseRedriveInput,
  type RedriveInput,
  type RedriveRequest,
  type RedriveResult,
  redrive,
  redriveDeadLetters,
} from './redrive.js';
export {
  parseReplayInput,
  type ReplayInput,
  type ReplayOptions,
  type ReplayRequest,
  type ReplayResult,
  replay,
  replayEvents,
} from './replay.js';
