-- The pod controller's orphan sweep (issue 12): a pod it made that no configured pod manages any more is
-- terminated with ORPHAN_SWEEP=terminate, and that call is a billable action like any other, trigger 'orphan'.
ALTER TABLE pod_actions DROP CONSTRAINT pod_actions_trigger_check;
ALTER TABLE pod_actions ADD CONSTRAINT pod_actions_trigger_check
    CHECK (trigger IN ('wake', 'idle', 'boot-grace', 'runtime-cap', 'manual', 'budget', 'orphan'));
