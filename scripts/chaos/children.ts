import type { ChildProcess } from 'node:child_process';

/** A child process of the suite's fleets (relays, consumers) that has not exited. */
export const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

/** Pids of the live children, for the suite's faults and its last-resort kill. */
export function livePids(children: ReadonlyArray<ChildProcess | undefined>): number[] {
  return children.flatMap((child) => (child?.pid && alive(child) ? [child.pid] : []));
}

/**
 * A fleet slot's process is down and may be started: a delayed restart (after
 * a crash or a poison row) checks this when it fires, so that it does not
 * start a second process beside one the fault injector's restart already
 * started. The first of the two would be left out of the fleet: never
 * stopped, it would go on relaying into the next mode's database.
 */
export const isDown = (child: ChildProcess | undefined) => !child || !alive(child);

/**
 * Every process a fleet started, so that stopping the fleet stops each of
 * them, and any that is no slot's current process is counted as a stray (a
 * suite bug: the run fails).
 */
export class Spawned {
  private readonly all = new Set<ChildProcess>();

  add(child: ChildProcess): void {
    this.all.add(child);
    child.once('exit', () => this.all.delete(child));
  }

  /** Live processes that no slot holds. */
  strays(current: ReadonlyArray<ChildProcess | undefined>): ChildProcess[] {
    const held = new Set(current);
    return [...this.all].filter((child) => alive(child) && !held.has(child));
  }

  live(): ChildProcess[] {
    return [...this.all].filter(alive);
  }
}

/** SIGTERM to each live child (it finishes its work and exits); SIGKILL to those still up after `graceMs`. */
export async function stopChildren(
  children: ReadonlyArray<ChildProcess | undefined>,
  graceMs: number,
): Promise<void> {
  await Promise.all(
    children.map(async (child) => {
      if (!child?.pid || !alive(child)) return;
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    }),
  );
}

/** Synchronous last resort (process exit): SIGKILL by pid. */
export function killNow(pids: readonly number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}
