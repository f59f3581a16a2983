/**
 * One error hierarchy for the whole library. Every error sets `name`, keeps
 * `cause`, and says whether retrying the same operation later can succeed.
 */
export class OutboxError extends Error {
  /** True when the same operation may succeed later (throttling, network, outage). */
  readonly retryable: boolean;

  constructor(message: string, options: { cause?: unknown; retryable?: boolean } = {}) {
    super(message, { cause: options.cause });
    this.name = 'OutboxError';
    this.retryable = options.retryable ?? false;
  }
}

/** Bad input to the write API or an operator command; nothing was written. */
export class ValidationError extends OutboxError {
  /** Dotted path of the offending field, e.g. `events[2].payload`. */
  readonly field: string;

  constructor(field: string, message: string, options: { cause?: unknown } = {}) {
    super(`${field}: ${message}`, options);
    this.name = 'ValidationError';
    this.field = field;
  }
}

/** A configuration value is missing or malformed; raised at cold start. */
export class ConfigError extends OutboxError {
  /** The environment variable (or option) at fault. */
  readonly variable: string;

  constructor(variable: string, message: string, options: { cause?: unknown } = {}) {
    super(`${variable}: ${message}`, options);
    this.name = 'ConfigError';
    this.variable = variable;
  }
}

/**
 * A publish to a target failed. `retryable: false` means the event itself is at
 * fault (too large, rejected by validation, no route) and retrying cannot help.
 */
export class PublishError extends OutboxError {
  /** The vendor's error code, when there is one (e.g. `ThrottlingException`). */
  readonly code: string | undefined;

  constructor(message: string, options: { cause?: unknown; retryable: boolean; code?: string | undefined }) {
    super(message, options);
    this.name = 'PublishError';
    this.code = options.code;
  }
}

/**
 * The database could not be reached (no connection from the pool). The
 * consumer gives records not yet tried back to the queue without trying each
 * one, since every one of them would wait for the same connection timeout.
 */
export class DatabaseUnavailableError extends OutboxError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { ...options, retryable: true });
    this.name = 'DatabaseUnavailableError';
  }
}

/**
 * PostgreSQL answered COMMIT with ROLLBACK: a statement inside the transaction
 * failed and the caller caught the error instead of letting it propagate.
 * Nothing written in the transaction was kept (for the consumer: neither the
 * handler's writes nor the dedupe row, so the record must not be acknowledged).
 */
export class TransactionRolledBackError extends OutboxError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { ...options, retryable: true });
    this.name = 'TransactionRolledBackError';
  }
}

/**
 * An outbox table, view or column was not where the outbox looked for it
 * (PostgreSQL's 42P01 undefined_table or 42703 undefined_column on one of the
 * outbox's own statements): the outbox lives in another schema than the one
 * given (or none was given, and the connection's `search_path` found nothing,
 * or a table of the same name that is not the outbox's), or its migrations
 * have not run. The message names the schema looked in and the fix; `cause`
 * is the database's error.
 */
export class OutboxSchemaError extends OutboxError {
  /** The schema the outbox looked in; undefined: unqualified names, through `search_path`. */
  readonly schema: string | undefined;
  /** The relation or column the database did not find, as it named it (undefined if it did not say). */
  readonly missing: string | undefined;
  /** The SQLSTATE: `42P01` (no such relation) or `42703` (no such column). */
  readonly code: '42P01' | '42703';

  constructor(
    message: string,
    options: {
      cause: unknown;
      schema: string | undefined;
      missing: string | undefined;
      code: '42P01' | '42703';
    },
  ) {
    super(message, { cause: options.cause });
    this.name = 'OutboxSchemaError';
    this.schema = options.schema;
    this.missing = options.missing;
    this.code = options.code;
  }
}
