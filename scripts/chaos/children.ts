import type { ChildProcess } from 'node:child_process';

/** A child process of the suite's fleets (relays, consumers) that has not exited. */
export const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

/** Pids of the live children, for the suite's faults and its last-resort kill. */
export function livePids(children: ReadonlyArray<ChildProcess | undefined>): number[] {
  return children.flatMap((child) => (child?.pid && alive(child) ? [child.pid] : []));
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
