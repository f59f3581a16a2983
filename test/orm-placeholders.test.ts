// The `$n` scanner behind the Drizzle and Knex adapters (pure logic; the
// adapters themselves run against PostgreSQL in orm-adapters.test.ts).
import { describe, expect, it } from 'vitest';
import { toKnexRaw } from '../lib/adapters/knex.js';
import { splitPlaceholders } from '../lib/adapters/placeholders.js';
import { ValidationError } from '../lib/errors.js';

describe('splitPlaceholders', () => {
  it('cuts at each $n, a repeated one each time', () => {
    expect(splitPlaceholders('SELECT $1::uuid[], $2, $1', 2)).toEqual({
      fragments: ['SELECT ', '::uuid[], ', ', ', ''],
      params: [0, 1, 0],
    });
  });

  it.each([
    ["'$1'", 'a string literal'],
    ["'it''s $1'", "a string literal with ''"],
    ["E'\\' $1'", "an E'' literal with an escaped quote"],
    ['"col$1"', 'a quoted identifier'],
    ['"a""$1"', 'a quoted identifier with ""'],
    ['-- $1\n', 'a line comment'],
    ['/* /* $1 */ $1 */', 'a nested block comment'],
    ['$$ $1 $$', 'a dollar-quoted string'],
    ['$tag$ $1 $x$ $tag$', 'a tagged dollar-quoted string'],
    ['price$1', 'an identifier containing $'],
  ])('leaves %s alone (%s)', (sql) => {
    expect(splitPlaceholders(`SELECT ${sql}`, 1)).toEqual({ fragments: [`SELECT ${sql}`], params: [] });
  });

  it("reads a standard string's backslash as text (standard_conforming_strings)", () => {
    expect(splitPlaceholders("SELECT 'a\\', $1", 1).params).toEqual([0]);
  });

  it('refuses a $n without a value and unterminated literals', () => {
    expect(() => splitPlaceholders('SELECT $2', 1)).toThrow(ValidationError);
    expect(() => splitPlaceholders('SELECT $0', 1)).toThrow(ValidationError);
    for (const sql of ["SELECT '$1", 'SELECT "x', 'SELECT /* x', 'SELECT $a$ x']) {
      expect(() => splitPlaceholders(sql, 1)).toThrow(/unterminated/);
    }
  });
});

describe('toKnexRaw', () => {
  it('binds each reference, escapes literal ?, keeps arrays one binding', () => {
    expect(
      toKnexRaw("SELECT $1, $2::text[] WHERE doc ? 'k' AND x = '?' AND y = $1", [7, ['a', 'b']]),
    ).toEqual({
      sql: "SELECT ?, ?::text[] WHERE doc \\? 'k' AND x = '\\?' AND y = ?",
      bindings: [7, ['a', 'b'], 7],
    });
  });

  it('keeps two adjacent placeholders from reading as ?? and sends undefined as null', () => {
    expect(toKnexRaw('SELECT $1$2', [1, undefined])).toEqual({ sql: 'SELECT ? ?', bindings: [1, null] });
  });

  it('refuses a backslash directly before ? or a parameter', () => {
    expect(() => toKnexRaw("SELECT E'\\\\?'", [])).toThrow(ValidationError);
    expect(() => toKnexRaw('SELECT \\$1', [1])).toThrow(ValidationError);
  });
});
