import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import type { OutboxMetrics } from 'pg-lambda-outbox';

/** Powertools Logger and Metrics for one function; namespace from POWERTOOLS_METRICS_NAMESPACE. */
export function observability(serviceName: string) {
  const logger = new Logger({ serviceName });
  const metrics = new Metrics({
    serviceName,
    namespace: process.env.POWERTOOLS_METRICS_NAMESPACE ?? 'Outbox',
  });
  return { logger, metrics, metricsSink: metricsSink(metrics) };
}

/**
 * Adapts the library's metric sink to Powertools. Metrics with extra
 * dimensions (failures by event type) go out as single metrics so they do not
 * mix with the invocation's other dimensions.
 */
export function metricsSink(metrics: Metrics): OutboxMetrics {
  return {
    record(name, unit, value, dimensions) {
      const powertoolsUnit = MetricUnit[unit];
      if (dimensions && Object.keys(dimensions).length > 0) {
        const single = metrics.singleMetric();
        for (const [key, dimension] of Object.entries(dimensions)) single.addDimension(key, dimension);
        single.addMetric(name, powertoolsUnit, value);
      } else {
        metrics.addMetric(name, powertoolsUnit, value);
      }
    },
  };
}
