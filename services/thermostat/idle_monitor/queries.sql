-- name: load_state
SELECT state, last_signal, last_signal_pod_id, last_tick_at, ticked_by FROM monitor_state WHERE pod_name = $1;

-- name: save_state
INSERT INTO monitor_state (pod_name, state, last_signal, last_signal_pod_id, last_tick_at, ticked_by, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, now())
ON CONFLICT (pod_name) DO UPDATE SET state = excluded.state, last_signal = excluded.last_signal,
    last_signal_pod_id = excluded.last_signal_pod_id, last_tick_at = excluded.last_tick_at,
    ticked_by = excluded.ticked_by, updated_at = now();
