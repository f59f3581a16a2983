/** What a relay process tells the suite over IPC, one message per invocation. */
export type RelayReport =
  | {
      type: 'invocation';
      ms: number;
      claimed: number;
      published: number;
      retried: number;
      deadLettered: number;
      leaseLost: number;
    }
  | { type: 'error'; ms: number; error: string }
  /** The process is about to kill itself on a poison row (chaos machinery, poison-crash.ts). */
  | { type: 'poison-crash'; poisonId: string; neighbours: string[] }
  | { type: 'ready' };

/** Exit code of a relay process whose invocation outlived its budget (as `timeout(1)`). */
export const TIMEOUT_EXIT_CODE = 124;
