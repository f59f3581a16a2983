// Control characters a terminal acts on: C0 (ESC starts a sequence that can
// move the cursor, rewrite the screen or set the window title), DEL, C1
// (U+009B is a one-character CSI) and the bidirectional overrides that
// reorder what is shown. Tab and newline are kept where text has lines.
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const UNSAFE_IN_LINES = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const UNSAFE_IN_CELL = /[\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]/g;

const escaped = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/**
 * Text safe to write to a terminal: every control character shown as its
 * escape (`\u009b`), so a string from the database (an aggregate id, an
 * error) cannot drive the operator's terminal. `lines` keeps tab and
 * newline; `cell` (one table cell) escapes them too. In JSON text the
 * escapes mean the same characters, so JSON output stays the same data.
 */
export function printable(text: string, keep: 'lines' | 'cell' = 'lines'): string {
  return text.replace(keep === 'lines' ? UNSAFE_IN_LINES : UNSAFE_IN_CELL, escaped);
}

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
export function textTable(header: readonly string[], input: ReadonlyArray<readonly string[]>): string {
  const rows = input.map((row) => row.map((cell) => printable(cell, 'cell')));
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
