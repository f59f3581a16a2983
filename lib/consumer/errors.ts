import { ValidationError } from '../errors.js';

/**
 * An SQS record the consumer cannot read: the body is not JSON, or it holds no
 * valid envelope, or no handler takes its event type. Retrying cannot fix it;
 * the record is reported as failed so the queue's redrive policy moves it to
 * the dead-letter queue after `maxReceiveCount` receives.
 */
export class MalformedMessageError extends ValidationError {
  /** The SQS message id of the record. */
  readonly messageId: string;
  /** The event id, when the body had a readable one (for the log line). */
  readonly eventId: string | undefined;
  /** The event type, when the body had a readable one. */
  readonly eventType: string | undefined;

  constructor(
    messageId: string,
    field: string,
    message: string,
    options: { cause?: unknown; eventId?: string | undefined; eventType?: string | undefined } = {},
  ) {
    super(field, message, { cause: options.cause });
    this.name = 'MalformedMessageError';
    this.messageId = messageId;
    this.eventId = options.eventId;
    this.eventType = options.eventType;
  }
}

export { DatabaseUnavailableError, TransactionRolledBackError } from '../errors.js';
