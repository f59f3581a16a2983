/**
 * Renders rows as a plain-text table with a header line, columns padded to
 * their widest cell; what the CLI prints for humans (`--json` prints data).
 *
 * @example
 * textTable(['id', 'attempts'], [['a1', '3'], ['b2', '10']]);
 * // id  attempts
 * // --  --------
 * // a1  3
 * // b2  10
 */
export function textTable(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/** One line, at most `max` characters: for free text (errors) in a table cell. */
export function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** Seconds as a short human duration: `45s`, `3m 12s`, `2h 5m`, `3d 4h`. */
export function humanDuration(seconds: number): string {
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3600)}h`;
}
