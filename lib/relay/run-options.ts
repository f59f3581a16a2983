export interface RunOptions {
  /** Milliseconds left in the invocation (Lambda's `context.getRemainingTimeInMillis`). */
  remainingMs: () => number;
  /** Return as soon as a claim finds nothing (benchmarks, tests, the CLI). */
  stopWhenIdle?: boolean;
  /**
   * Return at once when the run's first claim finds nothing, without the idle
   * tail; once it has found work, the tail applies as usual. For the
   * schedule's safety-net runs of an elastic relay: an idle tick then costs
   * one claim, while a woken run keeps its tail for the events that follow.
   * Ignored without an idle tail (`idleTailMs: null`, always on).
   */
  leaveIfEmpty?: boolean;
  /**
   * This run's idle tail, instead of the relay's `idleTailMs`: a relay
   * started for a backlog returns when it is idle, even an always-on one.
   */
  idleTailMs?: number;
  /**
   * With `maxRelays` and an idle tail: when a relay already holds a slot,
   * return at once (`busy`) and leave the outbox to it. The last relay to
   * let its slot go looks for events once it has (see scale-policy.ts,
   * exitStep), so an event committed while a slot was held is taken by
   * that relay or its successor. For runs started by a producer's wake or
   * by the schedule; not for runs started for a backlog.
   */
  deferToRunning?: boolean;
  /**
   * A producer woke this run (`createRelayWaker`). With slots and an idle
   * tail, its tail is what a new start costs (scale-policy.ts,
   * wokenIdleTail), at most the relay's `idleTailMs`: producers wake the
   * next run when more comes.
   */
  woken?: boolean;
  /**
   * What starting a run costs besides its database work, in ms of this
   * run's time: Lambda's request price over this function's GB-s price
   * (the handler computes it from its memory). Default 0.
   */
  startPriceMs?: number;
  abortSignal?: AbortSignal;
  /** Skip the closing outbox stats query. */
  skipStats?: boolean;
}
