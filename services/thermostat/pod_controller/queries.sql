-- name: insert_action
INSERT INTO pod_actions (id, pod_name, action, pod_id, gpu_id, price_per_hour, http_status, ok, trigger, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- name: history_page
-- Billable actions and wake outcomes of one pod, newest first, keyset-paginated on (at, id).
SELECT kind, at, id, row FROM (
    SELECT 'action' AS kind, at, id::text AS id, to_jsonb(a) AS row FROM pod_actions a WHERE pod_name = $1
    UNION ALL
    SELECT 'wake', requested_at, attempt_id::text, to_jsonb(w) - 'result' - 'holder' FROM pod_wakes w
    WHERE pod_name = $1
) entries
WHERE ($2::timestamptz IS NULL OR (at, id) < ($2::timestamptz, $3::text))
ORDER BY at DESC, id DESC
LIMIT $4;

-- name: newest_wake
SELECT attempt_id, pod_name, requested_at, completed_at, outcome, wake_outcome, reason, pod_id, gpu_id,
       price_per_hour, candidates_considered, last_provider_status
FROM pod_wakes WHERE pod_name = $1 ORDER BY requested_at DESC LIMIT 1;

-- name: insert_wake
-- Fails with a unique violation while another wake of the pod is in flight.
INSERT INTO pod_wakes (attempt_id, pod_name, holder) VALUES ($1, $2, $3) RETURNING requested_at;

-- name: complete_wake
UPDATE pod_wakes SET completed_at = now(), outcome = $2, wake_outcome = $3, reason = $4, pod_id = $5,
    gpu_id = $6, price_per_hour = $7, candidates_considered = $8, last_provider_status = $9, result = $10
WHERE attempt_id = $1 AND completed_at IS NULL;

-- name: abandon_wakes
-- A wake whose replica lost its lease (crashed) is closed so that the next one can run.
UPDATE pod_wakes SET completed_at = now(), outcome = 'Failed', wake_outcome = 'Exception',
    reason = 'abandoned: the replica running it stopped before it completed'
WHERE pod_name = $1 AND completed_at IS NULL
RETURNING attempt_id;

-- name: in_flight_wake
SELECT attempt_id, holder, requested_at FROM pod_wakes WHERE pod_name = $1 AND completed_at IS NULL;

-- name: wake_result
SELECT completed_at, result FROM pod_wakes WHERE attempt_id = $1;

-- name: wake_completed_since
-- A wake that completed after a joiner arrived: it ran (at least its end) after the joiner asked, so its
-- result answers the joiner too.
SELECT attempt_id, result FROM pod_wakes
WHERE pod_name = $1 AND completed_at >= $2 AND result IS NOT NULL
ORDER BY completed_at DESC LIMIT 1;

-- name: stop_since
-- A stop RunPod accepted for the pod after a wake began: the wake must not start or replace it.
SELECT pod_id, trigger FROM pod_actions
WHERE pod_name = $1 AND action = 'Stop' AND ok AND at >= $2
ORDER BY at LIMIT 1;

-- name: db_now
SELECT now();

-- name: set_readiness
INSERT INTO pod_readiness (pod_name, pod_id, ready_since) VALUES ($1, $2, $3)
ON CONFLICT (pod_name, pod_id) DO UPDATE SET ready_since = excluded.ready_since
WHERE pod_readiness.ready_since IS DISTINCT FROM excluded.ready_since
RETURNING pod_name;

-- name: clear_readiness
DELETE FROM pod_readiness WHERE pod_name = $1 AND ($2::text IS NULL OR pod_id = $2);

-- name: readiness
SELECT ready_since FROM pod_readiness WHERE pod_name = $1 AND pod_id = $2;

-- name: latest_wake_before
-- The newest wake requested before a pod became ready: its start is where the boot is measured from.
SELECT attempt_id, requested_at, gpu_id FROM pod_wakes
WHERE pod_name = $1 AND requested_at <= $2 AND (pod_id = $3 OR pod_id IS NULL OR completed_at IS NULL)
ORDER BY requested_at DESC LIMIT 1;

-- name: created_gpu
-- The GPU type a pod was created on: a stopped pod restarts on its machine, so the type holds for its life.
SELECT gpu_id FROM pod_actions
WHERE pod_name = $1 AND pod_id = $2 AND action = 'Create' AND gpu_id IS NOT NULL
ORDER BY at DESC LIMIT 1;

-- name: insert_boot
INSERT INTO pod_boots (pod_name, pod_id, gpu_id, attempt_id, ready_at, duration_seconds)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING;

-- name: recent_boots
SELECT gpu_id, duration_seconds FROM pod_boots WHERE pod_name = $1 ORDER BY ready_at DESC LIMIT $2;
