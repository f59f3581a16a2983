// Schema issues as this package's errors carry them: by path and kind of
// check only. A library's own message may quote the value (valibot's
// `Invalid email: Received "jane@…"`, ArkType's too), and these errors are
// logged: payloads, which may hold personal data, must not reach the logs.
import { issuePath, type StandardSchemaV1 } from './standard-schema.js';

/** A schema issue as errors carry it: where, and which check failed; never the value or the library's message. */
export interface SchemaIssue {
  path: string;
  kind: string;
}

const KIND = /^[A-Za-z][\w-]{0,39}$/;
const TYPE_NAME = /^[A-Za-z]{1,20}$/;
const OBJECT_TYPES = new Set(['object', 'loose_object', 'strict_object', 'object_with_rest']);

/**
 * What check an issue failed, from the library's own codes and never from
 * its message (valibot and ArkType quote the value there: `Invalid email:
 * Received "jane@…"`): zod's `code` (with its `format`, or the type an
 * `invalid_type` expected), ArkType's `code`, valibot's `type` (a failed
 * schema as `invalid_type (expected <type>)`, a missing or extra key as
 * `invalid_key`). `invalid` when the library gives no code.
 */
export function issueKind(issue: StandardSchemaV1.Issue): string {
  const i = issue as { code?: unknown; type?: unknown; format?: unknown; expected?: unknown; kind?: unknown };
  const safe = (value: unknown, pattern: RegExp) =>
    typeof value === 'string' && pattern.test(value) ? value : undefined;
  const code = safe(i.code, KIND);
  if (code !== undefined) {
    const format = safe(i.format, KIND);
    if (format !== undefined) return `${code} (${format})`;
    const expected = code === 'invalid_type' ? safe(i.expected, TYPE_NAME) : undefined;
    return expected === undefined ? code : `${code} (expected ${expected})`;
  }
  const type = safe(i.type, KIND);
  if (type === undefined) return 'invalid';
  if (i.kind !== 'schema') return type;
  return OBJECT_TYPES.has(type) ? 'invalid_key' : `invalid_type (expected ${type})`;
}

export const describeIssue = (issue: StandardSchemaV1.Issue): SchemaIssue => {
  const path = issuePath(issue);
  return { path: path === '' ? 'payload' : `payload.${path}`, kind: issueKind(issue) };
};

/** Issues listed after the first in a message, at most. */
const MORE_ISSUES = 5;

/** ` (and payload.a: too_big; payload.b: invalid_type (expected string))`, or nothing. */
export function moreIssues(rest: readonly SchemaIssue[]): string {
  if (rest.length === 0) return '';
  const listed = rest.slice(0, MORE_ISSUES).map((r) => `${r.path}: ${r.kind}`);
  if (rest.length > MORE_ISSUES) listed.push(`${rest.length - MORE_ISSUES} more`);
  return ` (and ${listed.join('; ')})`;
}

/** A header value in an error message: short tokens as they are, anything else by its length. */
export const headerValue = (raw: string | undefined) =>
  raw === undefined || /^[\w.-]{1,16}$/.test(raw) ? JSON.stringify(raw) : `(${raw.length} characters)`;
