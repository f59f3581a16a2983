import { ConnectionLostError, guardPool } from '../db/connection-guard.js';
import { TransactionTimeoutError } from '../db/guarded-client.js';
import { withTransaction } from '../db/transaction.js';
import { OutboxError, ValidationError } from '../errors.js';
import type { Envelope } from '../publish/envelope.js';
import { loadOpenTelemetry, withConsumerSpan } from '../trace/opentelemetry.js';
import { DatabaseUnavailableError, MalformedMessageError } from './errors.js';
import type { EventHandler, HandlerContext, MessageSource } from './handlers.js';
import { resolvePayload } from './large-payload.js';
import { markProcessed, markReplayProcessed, wasProcessed } from './mark-processed.js';
import { parseMessageBody } from './message-body.js';
import { type ConsumerOptions, type ResolvedConsumerOptions, resolveConsumerOptions } from './options.js';
import { type ConsumerResult, isAcknowledged, type RecordOutcome, summarize } from './outcome.js';
import { recordTrace } from './record-trace.js';
import { type HandleMessagesOptions, type ReceivedMessage, sqsEventFromMessages } from './sdk-messages.js';
import type { SQSEvent, SQSRecord } from './sqs-types.js';

export interface HandleOptions {
  /**
   * Milliseconds left in the invocation (Lambda's
   * `context.getRemainingTimeInMillis`). When given, records are not started
   * within `safetyMarginMs` of the end, and a started record's statements
   * must finish by then: its transaction's `statement_timeout` is lowered to
   * the time left, so a record stuck on a lock fails alone instead of the
   * Lambda timeout failing the whole batch.
   */
  remainingMs?: () => number;
}

/** Handles SQS batches of outbox events, each event at most once per consumer name. */
export interface Consumer {
  readonly name: string;
  /**
   * Handles the batch's records one after another, in order, each in its own
   * transaction, and reports every record that was not acknowledged in
   * `batchItemFailures`. Never throws for a record's failure.
   */
  handleSqsEvent(event: SQSEvent, options?: HandleOptions): Promise<ConsumerResult>;
  /**
   * The same for messages a poller received itself (`ReceiveMessage` with
   * `MessageSystemAttributeNames: ['All']` and `MessageAttributeNames:
   * ['All']`), from the queue named in `options`. `batchItemFailures` holds
   * the ids of the messages not acknowledged: delete the others, leave these
   * to come back after their visibility timeout.
   */
  handleMessages(
    messages: readonly ReceivedMessage[],
    options: HandleMessagesOptions,
  ): Promise<ConsumerResult>;
}

/**
 * FIFO queues only: the record's message group. Standard queues may carry a
 * MessageGroupId too (fair queues) but promise no order, so it is ignored
 * there. `SequenceNumber` is set on FIFO messages only, which tells them apart
 * even when the event source ARN is not at hand.
 */
function fifoGroup(record: SQSRecord): string | undefined {
  const fifo = record.eventSourceARN?.endsWith('.fifo') || record.attributes?.SequenceNumber !== undefined;
  return fifo ? record.attributes?.MessageGroupId : undefined;
}

/**
 * The deadline or lost connection behind a handler's error. An ORM used in
 * the handler (docs/orm.md) may wrap the error of the statement it ran
 * (Drizzle's `cause`, TypeORM's `driverError`); the record failed for what is
 * underneath, and is reported as such.
 */
function databaseFailureIn(error: unknown): TransactionTimeoutError | DatabaseUnavailableError | undefined {
  let current = error as { cause?: unknown; driverError?: unknown } | null | undefined;
  for (let depth = 0; current && depth < 5; depth++) {
    if (current instanceof TransactionTimeoutError || current instanceof DatabaseUnavailableError) {
      return current;
    }
    current = (current.cause ?? current.driverError) as typeof current;
  }
  return undefined;
}

function receiveCount(record: SQSRecord): number {
  const count = Number(record.attributes?.ApproximateReceiveCount);
  return Number.isFinite(count) ? count : 1;
}

class SqsConsumer implements Consumer {
  readonly name: string;

  constructor(private readonly options: ResolvedConsumerOptions) {
    this.name = options.name;
    guardPool(options.pool, options.logger);
  }

  async handleMessages(
    messages: readonly ReceivedMessage[],
    options: HandleMessagesOptions,
  ): Promise<ConsumerResult> {
    // async: a refused message rejects the promise, never throws at the call.
    return this.handleSqsEvent(sqsEventFromMessages(messages, options), options);
  }

  async handleSqsEvent(event: SQSEvent, handleOptions: HandleOptions = {}): Promise<ConsumerResult> {
    if (!event || !Array.isArray(event.Records)) {
      throw new ValidationError('event.Records', 'expected an SQS event ({ Records: [...] })');
    }
    const { logger, safetyMarginMs } = this.options;
    const outcomes: RecordOutcome[] = [];
    const failedGroups = new Set<string>();
    let stopped: Error | undefined;

    // Sequential on purpose: records of one FIFO group must be handled in
    // order, and one connection per invocation is all the database sees.
    for (const record of event.Records) {
      const group = fifoGroup(record);
      let outcome: RecordOutcome;
      if (stopped) {
        outcome = { messageId: record.messageId, status: 'deferred', error: stopped };
      } else if (group !== undefined && failedGroups.has(group)) {
        // The relay's group is `<aggregate type>:<aggregate id>`: named only where ids may be logged.
        const named = this.options.logAggregateId;
        outcome = {
          messageId: record.messageId,
          status: 'blocked',
          error: new OutboxError(
            `an earlier record of ${named ? `message group ${group}` : 'its message group'} failed in this batch`,
            { retryable: true },
          ),
        };
        logger.warn('record not processed: an earlier record of its FIFO message group failed', {
          message_id: record.messageId,
          ...(named ? { message_group_id: group } : {}),
        });
      } else {
        // One reading of the clock per record: it decides whether to start
        // and, if so, when the record's statements must have finished.
        const left = handleOptions.remainingMs?.();
        if (left !== undefined && left < safetyMarginMs) {
          stopped = new OutboxError('not started: the invocation is about to time out', { retryable: true });
          outcome = { messageId: record.messageId, status: 'deferred', error: stopped };
        } else {
          const deadline = left === undefined ? undefined : Date.now() + left - safetyMarginMs;
          outcome = await this.handleRecord(record, deadline);
          // No connection to be had: every other record would wait for the
          // same timeout. A connection lost mid-record is only that one; the
          // next record gets a fresh one.
          if (
            outcome.error instanceof DatabaseUnavailableError &&
            !(outcome.error instanceof ConnectionLostError)
          ) {
            stopped = outcome.error;
          }
        }
      }
      if (group !== undefined && !isAcknowledged(outcome)) failedGroups.add(group);
      outcomes.push(outcome);
    }

    const deferred = outcomes.filter((o) => o.status === 'deferred').length;
    if (deferred > 0) {
      logger.warn('records given back to the queue without being tried', {
        deferred,
        reason: stopped?.message,
      });
    }
    return summarize(outcomes);
  }

  private async handleRecord(record: SQSRecord, deadline: number | undefined): Promise<RecordOutcome> {
    const { logger, name, pool, schema } = this.options;
    const messageId = record.messageId;
    const fields: Record<string, unknown> = {
      message_id: messageId,
      receive_count: receiveCount(record),
    };
    let envelope: Envelope;
    let source: MessageSource;
    let handler: EventHandler | undefined;
    try {
      ({ envelope, source } = parseMessageBody(messageId, record.body ?? ''));
      Object.assign(fields, { event_id: envelope.id, event_type: envelope.type, source });
      // Ids may be personal data (an e-mail address): logged only when asked.
      if (this.options.logAggregateId) fields.aggregate_id = envelope.aggregateId;
      handler = this.options.handlers.get(envelope.type) ?? this.options.fallback;
      if (!handler) {
        throw new MalformedMessageError(
          messageId,
          'type',
          `no handler for event type "${envelope.type}" and no fallback handler`,
          { eventId: envelope.id, eventType: envelope.type },
        );
      }
    } catch (error) {
      const malformed = error as MalformedMessageError;
      // The log line names the message and why; never the body or payload.
      logger.error('malformed message: it will be retried and then moved to the dead-letter queue', {
        ...fields,
        event_id: malformed.eventId,
        event_type: malformed.eventType,
        reason: malformed.message,
      });
      return {
        messageId,
        status: 'malformed',
        eventId: malformed.eventId,
        eventType: malformed.eventType,
        error: malformed,
      };
    }

    const replayId = envelope.replayId;
    if (replayId) fields.replay_id = replayId;
    const handleReplay = replayId !== undefined && this.options.replays === 'handle';
    const duplicateMessage = replayId
      ? handleReplay
        ? 'duplicate replay skipped: this replay was already processed'
        : "replay skipped: the event was already processed (replays: 'skip')"
      : 'duplicate event skipped: already processed';

    if (envelope.payloadRef) {
      // The claim check. The dedupe row is looked up first, in a read of its
      // own: a duplicate (most redeliveries of a large event) is skipped
      // without a GetObject, and so is one redelivered after the bucket's
      // lifecycle expired its object. The payload is then fetched outside
      // any transaction, and the record's transaction below still inserts
      // the dedupe row with the handler's writes (a failed handler leaves no
      // row; a delivery that commits in between is caught by that insert).
      // Fetching inside the transaction after the insert would save the
      // look, but hold the transaction, and the dedupe row's lock every
      // concurrent delivery of the event waits on, across a download of up
      // to largePayloads.maxBytes.
      const ref = envelope.payloadRef;
      Object.assign(fields, { payload_ref: `s3://${ref.s3.bucket}/${ref.s3.key}`, payload_bytes: ref.bytes });
      let seen: boolean;
      try {
        seen = await withTransaction(
          pool,
          (tx) => wasProcessed(tx, name, envelope.id, handleReplay ? replayId : undefined, schema),
          { logger, deadline },
        );
      } catch (caught) {
        return this.failed(messageId, envelope, fields, caught);
      }
      if (seen) {
        logger.info(duplicateMessage, fields);
        return { messageId, status: 'duplicate', eventId: envelope.id, eventType: envelope.type };
      }
      try {
        const signal =
          deadline === undefined ? undefined : AbortSignal.timeout(Math.max(1, deadline - Date.now()));
        envelope = await resolvePayload(envelope, ref, this.options.largePayloads, signal);
      } catch (caught) {
        const error = caught instanceof Error ? caught : new Error(String(caught));
        logger.error(
          'payload stored in S3 not read: the record failed (the queue retries it, then moves it to its DLQ)',
          {
            ...fields,
            reason: error.message,
          },
        );
        return { messageId, status: 'failed', eventId: envelope.id, eventType: envelope.type, error };
      }
    }

    const trace = recordTrace(record, envelope);
    const context: HandlerContext = {
      consumer: name,
      messageId,
      receiveCount: receiveCount(record),
      source,
      record,
      logger,
      remainingMs: () =>
        deadline === undefined ? Number.POSITIVE_INFINITY : Math.max(0, deadline - Date.now()),
    };
    if (trace) context.trace = trace;
    if (replayId) context.replay = { id: replayId };
    const run = handler;
    try {
      // With OpenTelemetry installed, the record runs in a CONSUMER span
      // linked to the producer's context; without it, just runs.
      const status = await withConsumerSpan(
        await loadOpenTelemetry(),
        `process ${envelope.type}`,
        trace,
        {
          'messaging.system': 'aws_sqs',
          'messaging.operation.type': 'process',
          'messaging.message.id': messageId,
          'messaging.consumer.group.name': name,
          'outbox.event.id': envelope.id,
          'outbox.event.type': envelope.type,
        },
        () =>
          withTransaction(
            pool,
            async (tx) => {
              if (handleReplay) {
                // Once per replay id; the event's own dedupe row is written too
                // (if missing), so a late delivery of the original is skipped.
                if (!(await markReplayProcessed(tx, name, envelope.id, replayId, envelope.type, schema))) {
                  return 'duplicate' as const;
                }
                await markProcessed(tx, name, envelope.id, envelope.type, schema);
              } else if (!(await markProcessed(tx, name, envelope.id, envelope.type, schema))) {
                return 'duplicate' as const;
              }
              await run(envelope, tx, context);
              return 'processed' as const;
            },
            { logger, deadline },
          ),
      );
      if (status === 'duplicate') logger.info(duplicateMessage, fields);
      else logger.debug('event processed', fields);
      return { messageId, status, eventId: envelope.id, eventType: envelope.type };
    } catch (caught) {
      return this.failed(messageId, envelope, fields, caught);
    }
  }

  /** A record whose transaction (or dedupe look) failed: logged with why, reported failed. */
  private failed(
    messageId: string,
    envelope: Envelope,
    fields: Record<string, unknown>,
    caught: unknown,
  ): RecordOutcome {
    const error = databaseFailureIn(caught) ?? (caught instanceof Error ? caught : new Error(String(caught)));
    this.options.logger.error(
      error instanceof TransactionTimeoutError
        ? 'record cut off: the invocation ran out of time; transaction rolled back, the message will be retried'
        : error instanceof DatabaseUnavailableError
          ? 'database unavailable: record not processed'
          : 'event handler failed: transaction rolled back, the message will be retried',
      { ...fields, error },
    );
    return { messageId, status: 'failed', eventId: envelope.id, eventType: envelope.type, error };
  }
}

/**
 * Creates a consumer that deduplicates on the event id: per SQS record, one
 * transaction inserts `(name, event id)` into `processed_events` and runs the
 * event type's handler with the same client. A redelivered event finds its
 * row and is skipped; a failing handler rolls back and leaves no row, so the
 * retry runs it again.
 *
 * @example
 * const consumer = createConsumer({
 *   name: 'order-consumer',
 *   pool,
 *   handlers: {
 *     'order.created': async (event: Envelope<OrderCreated>, tx) => {
 *       await tx.query('INSERT INTO order_notifications (order_id, event_id) VALUES ($1, $2)', [
 *         event.payload.orderId,
 *         event.id,
 *       ]);
 *     },
 *   },
 *   logger, // Powertools Logger
 * });
 * // In the Lambda handler (functionResponseType: ReportBatchItemFailures):
 * const { batchItemFailures } = await consumer.handleSqsEvent(event, {
 *   remainingMs: () => context.getRemainingTimeInMillis(),
 * });
 * return { batchItemFailures };
 */
export function createConsumer<Events extends Record<string, unknown>>(
  options: ConsumerOptions<Events>,
): Consumer {
  return new SqsConsumer(resolveConsumerOptions(options));
}
