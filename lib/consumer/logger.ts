/** Structured log sink for the consumer; Powertools' Logger fits as is. */
export interface ConsumerLogger {
  debug(message: string, ...extra: Array<Record<string, unknown>>): void;
  info(message: string, ...extra: Array<Record<string, unknown>>): void;
  warn(message: string, ...extra: Array<Record<string, unknown>>): void;
  error(message: string, ...extra: Array<Record<string, unknown>>): void;
}

export const silentConsumerLogger: ConsumerLogger = { debug() {}, info() {}, warn() {}, error() {} };
