import { ValidationError } from '../errors.js';

/**
 * SQL with `$n` placeholders cut at each placeholder, as a tagged template
 * would be: `fragments[i]` is the text before the i-th placeholder, `params[i]`
 * is the 0-based index of the value it names, and the last fragment is the
 * text after the last one. `fragments.length === params.length + 1`.
 */
export interface SplitSql {
  fragments: string[];
  params: number[];
}

// PostgreSQL's identifier characters (scan.l: ident_start, ident_cont). A `$`
// inside an identifier (`price$1`) is part of it, not a parameter.
const IDENT_CONT = /[A-Za-z0-9_$\u0080-\uffff]/;
const DOLLAR_TAG = /^\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/;

/**
 * Splits `text` at its `$n` parameter references, the way PostgreSQL's lexer
 * reads them: a `$n` inside a string literal (`'...'`, `E'...'`,
 * `$tag$...$tag$`), a quoted identifier (`"..."`) or a comment (`--`, nested
 * `/* *\/`) is text, not a parameter. Assumes `standard_conforming_strings`
 * is on (PostgreSQL's default since 9.1): a backslash escapes only in `E'...'`.
 *
 * Throws {@link ValidationError} for a `$n` with no value in `valueCount`
 * (`$0`, or past the end), or an unterminated literal, identifier or comment.
 */
export function splitPlaceholders(text: string, valueCount: number): SplitSql {
  const fragments: string[] = [];
  const params: number[] = [];
  let start = 0; // where the current fragment begins
  let i = 0;
  const unterminated = (what: string): never => {
    throw new ValidationError('sql', `unterminated ${what} in: ${text.slice(0, 200)}`);
  };
  while (i < text.length) {
    const c = text[i] as string;
    const next = text[i + 1];
    if (c === "'") {
      // E'...' (and e'...'): backslash escapes. The E was consumed as an
      // identifier just before; look back for it.
      const escapes =
        (text[i - 1] === 'E' || text[i - 1] === 'e') && (i < 2 || !IDENT_CONT.test(text[i - 2] as string));
      i++;
      for (;;) {
        if (i >= text.length) unterminated('string literal');
        const d = text[i];
        if (escapes && d === '\\') i += 2;
        else if (d === "'") {
          if (text[i + 1] === "'") i += 2;
          else break;
        } else i++;
      }
      i++;
    } else if (c === '"') {
      i++;
      for (;;) {
        if (i >= text.length) unterminated('quoted identifier');
        if (text[i] === '"') {
          if (text[i + 1] === '"') i += 2;
          else break;
        } else i++;
      }
      i++;
    } else if (c === '-' && next === '-') {
      const end = text.indexOf('\n', i);
      i = end === -1 ? text.length : end + 1;
    } else if (c === '/' && next === '*') {
      let depth = 1;
      i += 2;
      while (depth > 0) {
        if (i >= text.length) unterminated('comment');
        if (text[i] === '/' && text[i + 1] === '*') {
          depth++;
          i += 2;
        } else if (text[i] === '*' && text[i + 1] === '/') {
          depth--;
          i += 2;
        } else i++;
      }
    } else if (c === '$' && next !== undefined && next >= '0' && next <= '9') {
      let end = i + 1;
      while (end < text.length && (text[end] as string) >= '0' && (text[end] as string) <= '9') end++;
      const n = Number(text.slice(i + 1, end));
      if (n < 1 || n > valueCount) {
        throw new ValidationError('values', `$${n} has no value (${valueCount} given)`);
      }
      fragments.push(text.slice(start, i));
      params.push(n - 1);
      i = end;
      start = end;
    } else if (c === '$') {
      const tag = DOLLAR_TAG.exec(text.slice(i))?.[0];
      if (tag === undefined) {
        i++;
      } else {
        const end = text.indexOf(tag, i + tag.length);
        if (end === -1) unterminated('dollar-quoted string');
        i = end + tag.length;
      }
    } else if (IDENT_CONT.test(c)) {
      // A whole identifier or number at once, `$` included.
      while (i < text.length && IDENT_CONT.test(text[i] as string)) i++;
    } else {
      i++;
    }
  }
  fragments.push(text.slice(start));
  return { fragments, params };
}
