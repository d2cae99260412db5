-- Issue 34: the inference gateway wakes a pod on request. Its wakes and their billable calls carry trigger 'request';
-- a wake row keeps the trigger of the caller that began it. The idle monitor keeps each gateway replica's request
-- counts per pod (IdleMonitorInternal.ReportRequests), read by every monitor replica on its tick.
ALTER TABLE pod_wakes ADD COLUMN trigger text NOT NULL DEFAULT 'wake'
    CHECK (trigger IN ('wake', 'schedule', 'request'));
ALTER TABLE pod_actions DROP CONSTRAINT pod_actions_trigger_check;
ALTER TABLE pod_actions ADD CONSTRAINT pod_actions_trigger_check
    CHECK (trigger IN ('wake', 'schedule', 'request', 'idle', 'boot-grace', 'runtime-cap', 'stall', 'manual', 'budget',
                       'orphan'));
CREATE TABLE monitor_requests (
    pod_name    text        NOT NULL,
    reporter    text        NOT NULL,
    in_flight   integer     NOT NULL CHECK (in_flight >= 0),
    events      bigint      NOT NULL CHECK (events >= 0),
    live_until  timestamptz NOT NULL,
    PRIMARY KEY (pod_name, reporter)
);
