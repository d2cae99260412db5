-- name: load_state
SELECT state, last_signal, last_signal_pod_id, last_tick_at, ticked_by FROM monitor_state WHERE pod_name = :pod_name;

-- name: save_state
INSERT INTO monitor_state (pod_name, state, last_signal, last_signal_pod_id, last_tick_at, ticked_by, updated_at)
VALUES (:pod_name, :state, :last_signal, :last_signal_pod_id, :last_tick_at, :ticked_by, now())
ON CONFLICT (pod_name) DO UPDATE SET state = excluded.state, last_signal = excluded.last_signal,
    last_signal_pod_id = excluded.last_signal_pod_id, last_tick_at = excluded.last_tick_at,
    ticked_by = excluded.ticked_by, updated_at = now();

-- name: save_requests
-- One gateway replica's counts for a pod, as it holds them now; events only grow (a late report never rolls back).
INSERT INTO monitor_requests (pod_name, reporter, in_flight, events, live_until)
VALUES (:pod_name, :reporter, :in_flight, :events, now() + make_interval(secs => :live_seconds))
ON CONFLICT (pod_name, reporter) DO UPDATE SET in_flight = excluded.in_flight,
    events = greatest(monitor_requests.events, excluded.events), live_until = excluded.live_until
WHERE monitor_requests.events <= excluded.events;

-- name: load_requests
-- Every replica's counts for a pod: in flight only where the report is still live (a dead reporter keeps no pod up).
SELECT coalesce(sum(in_flight) FILTER (WHERE live_until > now()), 0)::int AS in_flight,
       coalesce(sum(events), 0)::bigint AS events
FROM monitor_requests WHERE lower(pod_name) = lower(:pod_name);
