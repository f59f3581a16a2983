import type { ClientBase, QueryResult } from 'pg';
import { OutboxError } from '../errors.js';

// The plain transaction statements ORMs send (Drizzle `begin`, Kysely
// `begin`, Knex `BEGIN;`), which become savepoints inside the consumer's
// transaction. Anything else that would start, end or hand off a transaction
// (an isolation level, which cannot change once the transaction has run a
// statement; PREPARE TRANSACTION) is refused.
const BEGIN = /^\s*(?:begin|start\s+transaction)(?:\s+(?:work|transaction))?\s*;?\s*$/i;
const COMMIT = /^\s*(?:commit|end)(?:\s+(?:work|transaction))?\s*;?\s*$/i;
const ROLLBACK = /^\s*(?:rollback|abort)(?:\s+(?:work|transaction))?\s*;?\s*$/i;
const OTHER_CONTROL =
  /^\s*(?:begin|start\s+transaction|commit|end|abort|prepare\s+transaction|rollback(?!(?:\s+(?:work|transaction))?\s+to\b))\b/i;

type Query = (config: unknown, values?: unknown) => Promise<QueryResult>;

/**
 * `tx.query` for an ORM working inside the consumer's transaction: the same
 * client (with the consumer's deadline and connection-loss handling), called
 * promise-style. The ORM can never commit or roll back the consumer's
 * transaction: its own transactions (`db.transaction(...)` in a handler)
 * become savepoints, BEGIN → `SAVEPOINT`, COMMIT → `RELEASE SAVEPOINT`,
 * ROLLBACK → `ROLLBACK TO SAVEPOINT`, so an inner transaction that fails
 * undoes only its own writes, and one that "commits" is kept only if the
 * consumer's transaction commits. Other transaction control is refused.
 *
 * Savepoints nest: run the ORM's transactions one after another (or nested),
 * not at once on one handler's client.
 */
export function confine(tx: Pick<ClientBase, 'query'>, by: string): Query {
  if (typeof tx?.query !== 'function') {
    throw new OutboxError(`${by}: expected the client a consumer handler receives (an object with query)`);
  }
  const client = tx as unknown as { query(...args: unknown[]): Promise<QueryResult> };
  let depth = 0;
  const refuse = (text: string, why: string) =>
    Promise.reject(new OutboxError(`${by}: "${text.trim().slice(0, 60)}" refused: ${why}`));
  return (config, values) => {
    const text = typeof config === 'string' ? config : (config as { text?: unknown } | null)?.text;
    if (typeof text === 'string') {
      if (BEGIN.test(text)) {
        depth++;
        return client.query(`SAVEPOINT pg_lambda_outbox_${depth}`);
      }
      if (COMMIT.test(text) || ROLLBACK.test(text)) {
        if (depth === 0) {
          return refuse(
            text,
            "a consumer handler runs inside the consumer's transaction, which commits or rolls back when the handler returns or throws",
          );
        }
        const savepoint = `pg_lambda_outbox_${depth}`;
        depth--;
        return COMMIT.test(text)
          ? client.query(`RELEASE SAVEPOINT ${savepoint}`)
          : client.query(`ROLLBACK TO SAVEPOINT ${savepoint}; RELEASE SAVEPOINT ${savepoint}`);
      }
      if (OTHER_CONTROL.test(text)) {
        return refuse(
          text,
          "inside the consumer's transaction a transaction can only be nested as a savepoint (no isolation level or access mode of its own)",
        );
      }
    }
    return values === undefined ? client.query(config) : client.query(config, values);
  };
}
