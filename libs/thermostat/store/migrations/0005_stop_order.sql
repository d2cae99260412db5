-- Stops are ordered against wakes by when they were issued, not by when their record landed (issue 7: a
-- wake asked for just after the idle monitor's stop failed as "stopped during the wake").

-- pod_stops: one row per stop call through the controller, written before RunPod is asked (issued_at, under
-- the pod's order lock) and settled once every pod's answer is in (accepted_pod_ids: what RunPod accepted).
-- A wake waits for a stop in flight and halts only for one issued after it was requested.
CREATE TABLE pod_stops (
    stop_id           uuid PRIMARY KEY,
    pod_name          text NOT NULL,
    trigger           text NOT NULL CHECK (trigger IN ('idle', 'boot-grace', 'runtime-cap', 'manual')),
    issued_at         timestamptz NOT NULL,
    settled_at        timestamptz,
    accepted_pod_ids  text[] NOT NULL DEFAULT '{}'
);
CREATE INDEX pod_stops_by_pod ON pod_stops (pod_name, issued_at DESC);

-- The stop a Stop action belongs to; NULL when the stop could not be written first (a store blip), and
-- such a Stop is then ordered by its own record time, as before.
ALTER TABLE pod_actions ADD COLUMN stop_id uuid;
