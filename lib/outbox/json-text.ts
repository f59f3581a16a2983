import { ValidationError } from '../errors.js';
import { INT64_BOUND, MAX_PAYLOAD_DEPTH } from './limits.js';

// The characters and JSON an event may hold: what PostgreSQL can store and
// the brokers accept, checked with the path of the culprit.

/**
 * What reaches a broker and how, which decides the characters each field may
 * hold. SQS accepts only #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
 * #x10000-#x10FFFF in the body and in attribute values (SendMessage API
 * reference); PostgreSQL cannot store U+0000 in text or jsonb, nor a lone
 * surrogate in jsonb (and `pg` would silently turn one in text into U+FFFD).
 *
 * - Event type, aggregate type and id are SQS message attributes, sent raw: no
 *   C0 control character but tab, LF and CR, no U+FFFE/U+FFFF.
 * - Payload and header strings (and keys) travel inside the JSON body, where
 *   JSON escapes every control character (U+0001 becomes `\u0001`, which SQS
 *   accepts); U+FFFE and U+FFFF are not escaped and reach SQS as they are.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
export const NOT_IN_ATTRIBUTE = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: U+0000 is what it finds
export const NOT_IN_JSON_STRING = /[\u0000\uFFFE\uFFFF]/;
/**
 * Screens a whole JSON text at native speed: JSON.stringify writes a lone
 * surrogate as `\udXXX` and U+0000 as `\u0000`; U+FFFE/U+FFFF stay raw. A hit
 * may be a false alarm (an escaped backslash before "u0000"); the payload is
 * then walked string by string to find the field, if any.
 */
const SUSPECT_IN_JSON_TEXT = /\\u(?:0000|d[89a-f])|[\uFFFE\uFFFF]/;

// Local copies: read on every value of the payload.
const INT64 = INT64_BOUND;
const PAYLOAD_DEPTH = MAX_PAYLOAD_DEPTH;

/** `a TypeError`: what was thrown, without its message. */
const errorName = (error: unknown): string => {
  const name = error instanceof Error ? error.name : typeof error;
  return `${/^[aeiou]/i.test(name) ? 'an' : 'a'} ${name}`;
};

const isWellFormed = (text: string): boolean =>
  (text as unknown as { isWellFormed(): boolean }).isWellFormed();

/** Why `text` cannot be stored or published, or undefined when it can. */
export function badChars(text: string, forbidden: RegExp): string | undefined {
  if (!isWellFormed(text)) {
    const lone = (/\p{Cs}/u.exec(text)?.[0] ?? '').charCodeAt(0);
    return `contains a lone UTF-16 surrogate (\\u${lone.toString(16)}), which PostgreSQL cannot store`;
  }
  const found = forbidden.exec(text)?.[0];
  if (found === undefined) return undefined;
  const code = found.charCodeAt(0);
  if (code === 0) return 'contains a NUL character (\\u0000), which PostgreSQL cannot store';
  return `contains the character U+${code.toString(16).toUpperCase().padStart(4, '0')}, which SQS refuses`;
}

export function checkChars(field: string, text: string, forbidden: RegExp): void {
  const problem = badChars(text, forbidden);
  if (problem) throw new ValidationError(field, problem);
}

export function requireText(field: string, value: unknown, max: number): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new ValidationError(field, 'must be a non-empty string');
  }
  // varchar(n) counts characters (code points), not UTF-16 units.
  const length = value.length <= max ? value.length : [...value].length;
  if (length > max) {
    throw new ValidationError(field, `must be at most ${max} characters, got ${length}`);
  }
  checkChars(field, value, NOT_IN_ATTRIBUTE);
  return value;
}

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

/** `payload.items[3].name`, `headers["x-trace"]`. */
export function formatPath(root: string, keys: readonly (string | number)[]): string {
  let path = root;
  for (const key of keys) {
    if (typeof key === 'number') path += `[${key}]`;
    else path += IDENTIFIER.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
  }
  return path;
}

/**
 * One pass over a value, following JSON.stringify's rules (toJSON, boxed
 * primitives, skipped undefined/function/symbol members), that refuses what
 * JSON.stringify would throw on (BigInt, cycles) with the path of the culprit,
 * and what EventBridge refuses (integers outside 64 bits, nesting deeper than
 * it processes). It also counts the bytes the stored text adds to
 * JSON.stringify's: jsonb prints small numbers that JSON.stringify writes with
 * an exponent as plain digits, and the relay publishes the stored text
 * (compacted: jsonb's spaces after `:` and `,` are dropped, see compactJson).
 */
class JsonWalk {
  /** Bytes `payload::text` has beyond JSON.stringify's output. */
  extraStoredBytes = 0;
  private readonly keys: (string | number)[] = [];
  private readonly containers: object[] = [];

  constructor(
    private readonly root: string,
    private readonly checkStrings: boolean,
  ) {}

  fail(message: string): never {
    throw new ValidationError(formatPath(this.root, this.keys), message);
  }

  /** Returns false when JSON.stringify would leave the value out. */
  visit(input: unknown, key: string | number, depth: number): boolean {
    let value = input;
    if (value !== null && (typeof value === 'object' || typeof value === 'bigint')) {
      const toJSON = (value as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === 'function') {
        try {
          value = toJSON.call(value, String(key));
        } catch (error) {
          // Its name only: the message may quote the value, and errors are logged.
          throw new ValidationError(
            formatPath(this.root, this.keys),
            `is not JSON-serializable (its toJSON threw ${errorName(error)})`,
          );
        }
      }
    }
    switch (typeof value) {
      case 'string':
        if (this.checkStrings) this.string(value);
        return true;
      case 'number':
        this.number(value);
        return true;
      case 'boolean':
        return true;
      case 'bigint':
        return this.fail(
          'is a BigInt, which is not JSON-serializable; send it as a string (or as a number within ±2^53)',
        );
      case 'object':
        if (value === null) return true;
        return this.object(value, depth);
      default:
        // undefined, functions and symbols: left out of objects, null in arrays.
        return false;
    }
  }

  private string(value: string, what = ''): void {
    if (!isWellFormed(value) || NOT_IN_JSON_STRING.test(value)) {
      this.fail(`${what}${badChars(value, NOT_IN_JSON_STRING)}`);
    }
  }

  private number(value: number): void {
    if (value >= INT64 || value <= -INT64) {
      this.fail(
        `is ${value}, outside the 64-bit integer range EventBridge accepts ` +
          '(-9223372036854775808 to 9223372036854775807); send it as a string',
      );
    }
    // JSON.stringify writes 1e-7 with an exponent; jsonb stores and prints
    // 0.0000001. Only numbers this small change length.
    if (value !== 0 && value > -1e-6 && value < 1e-6) {
      const text = String(value);
      const e = text.indexOf('e-');
      if (e > 0) {
        const mantissaDigits = text.slice(0, e).replace(/[-.]/g, '').length;
        const exponent = Number(text.slice(e + 2));
        const plain = (value < 0 ? 1 : 0) + 2 + (exponent - 1) + mantissaDigits;
        this.extraStoredBytes += plain - text.length;
      }
    }
  }

  private object(value: object, depth: number): boolean {
    const isArray = Array.isArray(value);
    if (!isArray && Object.getPrototypeOf(value) !== Object.prototype) {
      // Boxed primitives serialize as their primitive.
      if (value instanceof Number) {
        this.number(Number(value));
        return true;
      }
      if (value instanceof String) {
        if (this.checkStrings) this.string(String(value));
        return true;
      }
      if (value instanceof Boolean) return true;
      if (value instanceof BigInt) {
        return this.fail('is a BigInt, which is not JSON-serializable; send it as a string');
      }
    }
    if (depth >= PAYLOAD_DEPTH) this.tooDeep(value);
    this.containers.push(value);
    if (isArray) {
      const array = value as unknown[];
      const length = array.length;
      for (let i = 0; i < length; i++) {
        this.keys.push(i);
        this.visit(array[i], i, depth + 1);
        this.keys.pop();
      }
    } else {
      const record = value as Record<string, unknown>;
      for (const key of Object.keys(record)) {
        this.keys.push(key);
        if (this.visit(record[key], key, depth + 1)) {
          if (this.checkStrings) this.string(key, 'has a name that ');
        }
        this.keys.pop();
      }
    }
    this.containers.pop();
    return true;
  }

  private tooDeep(value: object): never {
    // A cycle recurses until it reaches the depth limit: tell it apart, and
    // name the member that closes the loop (containers[i] is reached through
    // keys[0..i-1]).
    const seen = new Set<object>();
    for (let i = 0; i < this.containers.length; i++) {
      const container = this.containers[i] as object;
      if (seen.has(container)) {
        this.keys.length = i;
        break;
      }
      seen.add(container);
    }
    if (this.keys.length < this.containers.length || seen.has(value)) {
      return this.fail('is a circular reference, which is not JSON-serializable');
    }
    return this.fail(
      `nests deeper than the ${MAX_PAYLOAD_DEPTH} levels EventBridge processes under the envelope`,
    );
  }
}

export interface SerializedPayload {
  json: string;
  /** UTF-8 size of the payload as PostgreSQL will store and the relay publish it. */
  storedBytes: number;
  /** What PostgreSQL's text of the payload adds to `json`. */
  extraStoredBytes: number;
}

export function serializePayload(field: string, value: unknown): SerializedPayload {
  const walk = new JsonWalk(field, false);
  if (!walk.visit(value, '', 0)) {
    throw new ValidationError(field, `is not JSON-serializable (got ${typeof value})`);
  }
  let json: string;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    // A getter that threw: its name only, as for toJSON above.
    throw new ValidationError(field, `is not JSON-serializable (serializing it threw ${errorName(error)})`);
  }
  if (SUSPECT_IN_JSON_TEXT.test(json)) {
    // Rare: find the string or key at fault, with its path.
    new JsonWalk(field, true).visit(value, '', 0);
  }
  const extraStoredBytes = walk.extraStoredBytes;
  return { json, storedBytes: Buffer.byteLength(json, 'utf8') + extraStoredBytes, extraStoredBytes };
}
