/**
 * Sorting AWS failures by whose fault they are. Only failures known to be the
 * event's own fault are permanent; everything else is retried, so a broker
 * outage or a misconfigured queue never dead-letters healthy events.
 */

/** Why a whole API call failed. */
export type CallFailureKind = 'network' | 'throttled' | 'server' | 'config' | 'invalid-request' | 'unknown';

export interface CallFailure {
  kind: CallFailureKind;
  retryable: boolean;
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
  'QueueDeletedRecently',
]);

const THROTTLE_CODES = new Set([
  'ThrottlingException',
  'Throttling',
  'RequestThrottled',
  'TooManyRequestsException',
  'RequestLimitExceeded',
  'KmsThrottled',
  'KMS.ThrottlingException',
]);

/** The whole request was malformed: a property of its entries, not of the environment. */
const INVALID_REQUEST_CODES = new Set([
  'InvalidParameterValue',
  'InvalidMessageContents',
  'BatchRequestTooLong',
  'ValidationException',
  'InvalidAttributeValue',
  'InvalidAttributeName',
  'MissingParameter',
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
  'AbortError',
]);

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
  const has = (set: Set<string>) => set.has(code) || (e.code !== undefined && set.has(e.code));

  if (has(CONFIG_CODES) || status === 403) return { kind: 'config', retryable: true, code, message };
  if (has(THROTTLE_CODES) || status === 429) return { kind: 'throttled', retryable: true, code, message };
  if (has(INVALID_REQUEST_CODES)) return { kind: 'invalid-request', retryable: false, code, message };
  if (has(NETWORK_CODES) || status === undefined) return { kind: 'network', retryable: true, code, message };
  if (status >= 500 || e.$fault === 'server') return { kind: 'server', retryable: true, code, message };
  return { kind: 'unknown', retryable: true, code, message };
}

/** EventBridge per-entry error codes that mean the entry itself was rejected. */
const EVENTBRIDGE_PERMANENT_ENTRY_CODES = new Set([
  'InvalidArgument',
  'MalformedDetail',
  'ValidationException',
  'InvalidEventPatternException',
]);

/** Whether a per-entry EventBridge `ErrorCode` is worth retrying. */
export function isRetryableEventBridgeEntryCode(code: string): boolean {
  return !EVENTBRIDGE_PERMANENT_ENTRY_CODES.has(code);
}
