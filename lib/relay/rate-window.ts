/** A measure needs this long of full claims... */
export const PROBE_WINDOW_MS = 1_000;
/** ...and this many batches at least (a slow relay's window is longer). */
export const PROBE_MIN_BATCHES = 8;

/**
 * A run's publishing rate: [time, events published so far] after each
 * batch, the last PROBE_WINDOW_MS * 4 of them (and PROBE_MIN_BATCHES * 4
 * batches at least), and when a claim last came back short of a full batch.
 * Times are `performance.now()` values, passed in, so it is exact in tests.
 */
export class RateWindow {
  private samples: Array<[number, number]> = [];
  private published = 0;
  /** When a claim last came back short of a full batch (or the run started). */
  lastShortAt: number;

  constructor(startedAt: number) {
    this.lastShortAt = startedAt;
  }

  note(at: number, published: number, full: boolean): void {
    this.published += published;
    this.samples.push([at, this.published]);
    const keepFrom = at - PROBE_WINDOW_MS * 4;
    let drop = 0;
    while (
      this.samples.length - drop > PROBE_MIN_BATCHES * 4 &&
      (this.samples[drop] as [number, number])[0] < keepFrom
    )
      drop++;
    if (drop > 0) this.samples.splice(0, drop);
    if (!full) this.lastShortAt = at;
  }

  /**
   * The start of the last PROBE_WINDOW_MS that held PROBE_MIN_BATCHES
   * batches (longer when batches are slow), all of them full; undefined when
   * the run has not had such a window yet.
   */
  fullWindowStart(now: number): number | undefined {
    const n = this.samples.length;
    if (n < PROBE_MIN_BATCHES + 1) return undefined;
    const byCount = (this.samples[n - 1 - PROBE_MIN_BATCHES] as [number, number])[0];
    const start = Math.min(now - PROBE_WINDOW_MS, byCount);
    const first = (this.samples[0] as [number, number])[0];
    if (start < first || this.lastShortAt >= start) return undefined;
    return start;
  }

  /** Batches finished after `from`. */
  batchesSince(from: number): number {
    let n = 0;
    for (let i = this.samples.length - 1; i >= 0 && (this.samples[i] as [number, number])[0] > from; i--) n++;
    return n;
  }

  /** Events per second published since `from` (counted from the last batch at or before it). */
  rateSince(from: number, now: number): number {
    let base: [number, number] | undefined;
    for (const sample of this.samples) {
      if (sample[0] > from) break;
      base = sample;
    }
    base ??= this.samples[0];
    if (!base || now - base[0] <= 0) return 0;
    return ((this.published - base[1]) / (now - base[0])) * 1_000;
  }
}
