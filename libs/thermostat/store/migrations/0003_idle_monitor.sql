-- The idle monitor's memory per named pod: phase, streaks, per-pod baselines and readiness, runtime-cap
-- start (MonitorState as JSON), so a restarted or failed-over replica continues exactly where it was.
CREATE TABLE monitor_state (
    pod_name            text PRIMARY KEY,
    state               jsonb NOT NULL,
    last_signal         text NOT NULL DEFAULT '',
    last_signal_pod_id  text NOT NULL DEFAULT '',
    last_tick_at        timestamptz,
    ticked_by           text NOT NULL DEFAULT '',
    updated_at          timestamptz NOT NULL DEFAULT now()
);
