/** Structured log sink of the relay, consumer and operations; Powertools' Logger fits as is. */
export interface OutboxLogger {
  debug(message: string, ...extra: Array<Record<string, unknown>>): void;
  info(message: string, ...extra: Array<Record<string, unknown>>): void;
  warn(message: string, ...extra: Array<Record<string, unknown>>): void;
  error(message: string, ...extra: Array<Record<string, unknown>>): void;
}

export type MetricUnit = 'Count' | 'Milliseconds' | 'Seconds';

/** Metric sink; functions/ adapts it to Powertools Metrics (CloudWatch EMF). */
export interface OutboxMetrics {
  record(name: string, unit: MetricUnit, value: number, dimensions?: Record<string, string>): void;
}

export const silentLogger: OutboxLogger = { debug() {}, info() {}, warn() {}, error() {} };
export const noMetrics: OutboxMetrics = { record() {} };
