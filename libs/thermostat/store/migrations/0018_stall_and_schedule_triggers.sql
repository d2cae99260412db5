-- Issue 26: the idle monitor's stall guard stops with trigger 'stall' (a billable Stop and its stop order), and a
-- warm-hours wake issued by the pod controller's schedule records its billable Start/Create with trigger 'schedule'.
ALTER TABLE pod_actions DROP CONSTRAINT pod_actions_trigger_check;
ALTER TABLE pod_actions ADD CONSTRAINT pod_actions_trigger_check
    CHECK (trigger IN ('wake', 'schedule', 'idle', 'boot-grace', 'runtime-cap', 'stall', 'manual', 'budget', 'orphan'));
ALTER TABLE pod_stops DROP CONSTRAINT pod_stops_trigger_check;
ALTER TABLE pod_stops ADD CONSTRAINT pod_stops_trigger_check
    CHECK (trigger IN ('idle', 'boot-grace', 'runtime-cap', 'stall', 'manual', 'budget'));
