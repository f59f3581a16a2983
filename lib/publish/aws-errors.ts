/**
 * Sorting AWS failures by whose fault they are, with one table for whole
 * calls and for single entries of a batch (SQS `Failed[].Code`, EventBridge
 * `Entries[].ErrorCode`): a throttled entry is throttled, whether the whole
 * call or one entry says so.
 *
 * - The environment's fault (network, timeout, throttling, 5xx, access denied,
 *   missing queue or key): retried without spending the event's attempts; the
 *   target is backed off as a whole (see circuit-breaker.ts).
 * - The event's fault (invalid, too large): permanent, dead-lettered at once.
 * - Anything else: retried, and each try spends an attempt.
 */

/** Why a call, or one entry of it, failed. */
export type FailureKind =
  | 'network'
  | 'throttled'
  | 'server'
  | 'config'
  | 'deadline'
  | 'invalid-request'
  | 'unknown';

export interface CallFailure {
  kind: FailureKind;
  /** False when the event itself is at fault and a retry cannot succeed. */
  retryable: boolean;
  /** True when the environment is at fault: retry without spending an attempt. */
  environment: boolean;
  code: string;
  message: string;
}

const CONFIG_CODES = new Set([
  'QueueDoesNotExist',
  'AWS.SimpleQueueService.NonExistentQueue',
  'ResourceNotFoundException',
  'AccessDenied',
  'AccessDeniedException',
  'NotAuthorizedForSourceException',
  'UnrecognizedClientException',
  'InvalidClientTokenId',
  'InvalidSecurity',
  'SignatureDoesNotMatch',
  'ExpiredToken',
  'ExpiredTokenException',
  'KmsAccessDenied',
  'KMS.AccessDeniedException',
  'KmsDisabled',
  'KMS.DisabledException',
  'KmsNotFound',
  'KMS.NotFoundException',
  'KmsInvalidState',
  'KMS.KMSInvalidStateException',
  'KmsInvalidKeyUsage',
  'KMS.InvalidKeyUsageException',
  'KmsOptInRequired',
  'KMS.OptInRequired',
  'QueueDeletedRecently',
  // S3, for payloads stored by the claim check.
  'NoSuchBucket',
  'PermanentRedirect',
  'AuthorizationHeaderMalformed',
]);

const THROTTLE_CODES = new Set([
  'ThrottlingException',
  'Throttling',
  'RequestThrottled',
  'TooManyRequestsException',
  'RequestLimitExceeded',
  'LimitExceededException',
  'KmsThrottled',
  'KMS.ThrottlingException',
  'SlowDown',
]);

const SERVER_CODES = new Set([
  'InternalError',
  'InternalFailure',
  'InternalException',
  'ServiceUnavailable',
  'ServiceUnavailableException',
]);

/** The request (or entry) was malformed: a property of the event, not of the environment. */
const INVALID_CODES = new Set([
  'InvalidParameterValue',
  'InvalidMessageContents',
  'BatchRequestTooLong',
  'ValidationException',
  'InvalidAttributeValue',
  'InvalidAttributeName',
  'MissingParameter',
  'InvalidArgument',
  'MalformedDetail',
  'InvalidEventPatternException',
  'MessageTooLong',
]);

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'TimeoutError',
  'RequestTimeout',
  'RequestTimeoutException',
]);

/** The relay's own deadline cut the call short (see Relay: every call has one). */
const DEADLINE_CODES = new Set(['AbortError', 'DeadlineExceeded']);

function failure(kind: FailureKind, code: string, message: string): CallFailure {
  const environment = kind !== 'invalid-request' && kind !== 'unknown';
  return { kind, retryable: kind !== 'invalid-request', environment, code, message };
}

/** Classifies a code by the shared table; undefined when the code is not in it. */
function kindOfCode(code: string | undefined): FailureKind | undefined {
  if (!code) return undefined;
  if (CONFIG_CODES.has(code)) return 'config';
  if (THROTTLE_CODES.has(code)) return 'throttled';
  if (SERVER_CODES.has(code)) return 'server';
  if (INVALID_CODES.has(code)) return 'invalid-request';
  if (DEADLINE_CODES.has(code)) return 'deadline';
  if (NETWORK_CODES.has(code)) return 'network';
  return undefined;
}

interface AwsLikeError {
  name?: string;
  code?: string;
  message?: string;
  Code?: string;
  $metadata?: { httpStatusCode?: number };
  $fault?: 'client' | 'server';
  /** Node's AggregateError (several addresses tried) keeps the socket errors here. */
  errors?: Array<{ code?: string }>;
}

/** Classifies an error thrown by an AWS SDK v3 call. */
export function classifyCallError(error: unknown): CallFailure {
  const e = (error ?? {}) as AwsLikeError;
  const name = e.name && e.name !== 'Error' && e.name !== 'AggregateError' ? e.name : undefined;
  const code = e.Code ?? name ?? e.code ?? e.errors?.[0]?.code ?? e.name ?? 'Error';
  const message = e.message || String(error);
  const status = e.$metadata?.httpStatusCode;
  const kind = kindOfCode(code) ?? kindOfCode(e.code) ?? kindOfCode(e.errors?.[0]?.code);
  if (kind) return failure(kind, code, message);
  if (status === 403) return failure('config', code, message);
  if (status === 429) return failure('throttled', code, message);
  if (status === undefined) return failure('network', code, message);
  if (status >= 500 || e.$fault === 'server') return failure('server', code, message);
  return failure('unknown', code, message);
}

/**
 * Classifies one failed entry of a batch call by its code, with the same
 * table as whole calls. Only when the code is unknown does SQS's `SenderFault`
 * decide: true (the entry was refused) is the event's fault, false (SQS
 * failed) the environment's. An unknown EventBridge code is retried and
 * spends an attempt.
 */
export function classifyEntryError(
  code: string | undefined,
  message: string,
  senderFault?: boolean,
): CallFailure {
  const shown = code ?? 'unknown';
  const kind = kindOfCode(code);
  if (kind) return failure(kind, shown, message);
  if (senderFault === true) return failure('invalid-request', shown, message);
  if (senderFault === false) return failure('server', shown, message);
  return failure('unknown', shown, message);
}
