-- Metering (issue 12, the budget check's latency): a pod's billable actions after a ledger position, so a
-- budget check folds only what landed since its last one.
CREATE INDEX ledger_pod_actions_by_pod_position ON ledger_pod_actions (lower(pod_name), position);
