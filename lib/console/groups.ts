import { createHash } from 'node:crypto';
import type { DeadLetterRow } from './queries.js';

/** Why a dead letter failed, as its group shows it. */
export interface FailureCause {
  eventType: string;
  /** The target the error names (`sqs:<queue url>`, `eventbridge:<bus>`), or null when it names none. */
  target: string | null;
  /** The error's kind: its text up to the first ':', numbers as `N` (`SQS config error`, `no route for event type "x"`). */
  errorClass: string;
}

export interface DeadLetterGroup extends FailureCause {
  /** Stable id of the cause, for `?group=` and a group's redrive or discard. */
  id: string;
  count: number;
  oldestDeadLetteredAt: Date;
  newestDeadLetteredAt: Date;
  /** One error text of the group, cut to 200 characters. */
  example: string;
}

// The relay's verdicts wrap the publisher's error: "attempt limit (5)
// reached; last error: <error>", "failing for reasons of the environment
// for longer than the maximum age (…); last error: <error>". The cause is
// the inner error.
const VERDICT =
  /^(?:attempt limit \(\d+\) reached|failing for reasons of the environment[^;]*); last error: /;
// A router error about one of several targets starts with the target's key.
const TARGET = /^((?:sqs|eventbridge):\S+?): /;
const MAX_CLASS_CHARS = 120;

/** The cause of a dead letter, from its event type and `last_error`. */
export function failureCause(eventType: string, lastError: string | null): FailureCause {
  let text = (lastError ?? '').replace(VERDICT, '');
  const target = TARGET.exec(text)?.[1] ?? null;
  if (target !== null) text = text.slice(target.length + 2);
  const head = text.split(':', 1)[0]?.trim() ?? '';
  const errorClass =
    head === '' ? '(no error recorded)' : head.replace(/\d+/g, 'N').slice(0, MAX_CLASS_CHARS);
  return { eventType, target, errorClass };
}

/** The id of a cause: the same cause always gets the same id. */
export function causeId(cause: FailureCause): string {
  return createHash('sha256')
    .update(JSON.stringify([cause.eventType, cause.target, cause.errorClass]))
    .digest('base64url')
    .slice(0, 16);
}

/** Dead letters grouped by cause, largest group first. */
export function groupDeadLetters(rows: readonly DeadLetterRow[]): DeadLetterGroup[] {
  const groups = new Map<string, DeadLetterGroup>();
  for (const row of rows) {
    const cause = failureCause(row.eventType, row.lastError);
    const id = causeId(cause);
    const group = groups.get(id);
    if (group === undefined) {
      groups.set(id, {
        id,
        ...cause,
        count: 1,
        oldestDeadLetteredAt: row.deadLetteredAt,
        newestDeadLetteredAt: row.deadLetteredAt,
        example: (row.lastError ?? '').slice(0, 200),
      });
      continue;
    }
    group.count++;
    if (row.deadLetteredAt < group.oldestDeadLetteredAt) group.oldestDeadLetteredAt = row.deadLetteredAt;
    if (row.deadLetteredAt > group.newestDeadLetteredAt) group.newestDeadLetteredAt = row.deadLetteredAt;
  }
  return [...groups.values()].sort((a, b) => b.count - a.count || a.id.localeCompare(b.id));
}

/** The rows of one group, oldest first (seq order: the order a redrive takes them in). */
export function rowsOfGroup(rows: readonly DeadLetterRow[], groupId: string): DeadLetterRow[] {
  return rows
    .filter((row) => causeId(failureCause(row.eventType, row.lastError)) === groupId)
    .sort((a, b) => (BigInt(a.seq) < BigInt(b.seq) ? -1 : 1));
}
