/** A node of `EXPLAIN (ANALYZE, FORMAT JSON)`'s plan, as far as the claim tests read it. */
export interface PlanNode {
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Join Filter'?: number;
  Plans?: PlanNode[];
}

/** Rows every node of the plan produced or filtered away: the work a statement did. */
export function rowsTouched(node: PlanNode): number {
  const own =
    (node['Actual Rows'] +
      (node['Rows Removed by Filter'] ?? 0) +
      (node['Rows Removed by Join Filter'] ?? 0)) *
    node['Actual Loops'];
  return own + (node.Plans ?? []).reduce((sum, child) => sum + rowsTouched(child), 0);
}
