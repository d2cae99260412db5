-- A pod on the record confirmed gone (policy/wake/pod_gone.py, issue 35): a 'Gone' record closes its billing, at
-- the observation that found it gone; its trigger is 'observe' (a reading found it, no call of ours).
ALTER TABLE pod_actions DROP CONSTRAINT pod_actions_action_check;
ALTER TABLE pod_actions ADD CONSTRAINT pod_actions_action_check
    CHECK (action IN ('Start', 'Create', 'Terminate', 'Stop', 'Gone'));
ALTER TABLE pod_actions DROP CONSTRAINT pod_actions_trigger_check;
ALTER TABLE pod_actions ADD CONSTRAINT pod_actions_trigger_check
    CHECK (trigger IN ('wake', 'schedule', 'request', 'idle', 'boot-grace', 'runtime-cap', 'stall', 'manual', 'budget',
                       'orphan', 'observe'));
