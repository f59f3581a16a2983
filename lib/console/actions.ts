import type { Pool } from 'pg';
import type { Queryable } from '../db/queryable.js';
import type { OutboxLogger } from '../observer.js';
import { type RedriveResult, redriveDeadLetters } from '../operations/redrive.js';
import { type ReplayResult, replayEvents } from '../operations/replay.js';
import { idsOfGroup } from './groups.js';
import { HttpError } from './http.js';

export type ActionName = 'redrive' | 'discard' | 'replay';

export interface ActionContext {
  pool: Pool;
  schema: string | undefined;
  /** Who asked, as the audit records it. */
  actor: string;
  logger: OutboxLogger;
  /** Reads in a bounded, read-only transaction (the handler's). */
  read: <T>(fn: (db: Queryable) => Promise<T>) => Promise<T>;
}

type Result = (RedriveResult | ReplayResult) & Record<string, unknown>;

/** Most ids written to the audit log line (the rest are counted). */
const LOGGED_IDS = 1000;

/**
 * Runs one action as the console offers it, in two steps:
 * 1. `{ dryRun: true, ...filter }`: the operation's dry run; the answer's
 *    `count` is how many rows the action would touch.
 * 2. `{ confirm: <count>, ...filter }`: the dry run again; if it still
 *    selects `count` rows, the action runs on exactly those rows (by id),
 *    else 409 with the new count. Without `confirm` (and not a dry run): 428.
 *
 * The filter is the operation's own input (validated by it: unknown keys are
 * refused), without `action`, `requestedBy` (the console sets who asked) and,
 * for redrive and discard, with `group`: a dead-letter group's id.
 */
export async function runAction(
  name: ActionName,
  body: Record<string, unknown>,
  ctx: ActionContext,
): Promise<Result> {
  const { dryRun, confirm, group, ...filter } = body;
  for (const key of ['action', 'requestedBy']) {
    if (key in filter) throw new HttpError(400, `${key}: set by the console, not by the request`);
  }
  if (dryRun !== undefined && typeof dryRun !== 'boolean')
    throw new HttpError(400, 'dryRun: must be true or false');
  if (confirm !== undefined && (!Number.isSafeInteger(confirm) || (confirm as number) < 0)) {
    throw new HttpError(400, 'confirm: must be the count the dry run returned');
  }
  if (group !== undefined) Object.assign(filter, { ids: await groupIds(name, group, filter, ctx) });

  const preview = await run(name, { ...filter, dryRun: true }, ctx);
  const count = preview.ids.length;
  if (dryRun === true) return { ...preview, count };
  if (confirm === undefined) {
    throw new HttpError(
      428,
      'run it with dryRun: true first, then again with confirm: <the count it returned>',
      {
        count,
      },
    );
  }
  if (confirm !== count) {
    throw new HttpError(409, 'the selection changed since the dry run; confirm the new count', { count });
  }
  const at = new Date();
  const done: Result =
    count === 0
      ? { ...preview, dryRun: false, count: 0 }
      : { ...(await run(name, { ids: preview.ids, limit: count }, ctx)), count };
  const changed = 'replayed' in done ? done.replayed : done.reset + done.discarded;
  ctx.logger.info(`console ${name}`, {
    action: name,
    actor: ctx.actor,
    at: at.toISOString(),
    confirmed: count,
    changed,
    busy: done.busy,
    filter: Object.keys(filter),
    ...(group !== undefined ? { group } : {}),
    ...('replayId' in done ? { replay_id: done.replayId } : {}),
    ids: done.ids.slice(0, LOGGED_IDS),
    ids_truncated: done.ids.length > LOGGED_IDS,
  });
  return { ...done, audit: { actor: ctx.actor, at: at.toISOString(), action: name, changed } };
}

/** The operation itself, who asked set by the console. */
async function run(name: ActionName, input: Record<string, unknown>, ctx: ActionContext): Promise<Result> {
  const requestedBy = ctx.actor;
  if (name === 'replay') {
    return replayEvents(
      ctx.pool,
      { ...input, requestedBy },
      { schema: ctx.schema, caller: { via: 'pg-lambda-outbox console', actor: ctx.actor } },
    ) as Promise<Result>;
  }
  return redriveDeadLetters(
    ctx.pool,
    { ...input, action: name, requestedBy },
    { schema: ctx.schema },
  ) as Promise<Result>;
}

/** A dead-letter group's ids (among the newest dead letters the groups are drawn from). */
async function groupIds(
  name: ActionName,
  group: unknown,
  filter: Record<string, unknown>,
  ctx: ActionContext,
): Promise<string[]> {
  if (name === 'replay') throw new HttpError(400, 'group: only redrive and discard take a dead-letter group');
  if (typeof group !== 'string' || !/^[0-9a-f]{16}$/.test(group)) {
    throw new HttpError(400, 'group: expected a group id from /api/dead-letters/groups');
  }
  if ('ids' in filter) throw new HttpError(400, 'give either group or ids, not both');
  const ids = await ctx.read((db) => idsOfGroup(db, group, ctx.schema));
  if (ids.length === 0)
    throw new HttpError(404, 'no dead letters in this group (redriven or discarded already?)');
  return ids;
}
