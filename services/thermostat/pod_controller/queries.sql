-- name: feed_lock
-- Taken (to the end of the transaction) before an action takes its position: positions then become
-- visible in increasing order, so the feed's reader never skips one that commits late.
SELECT pg_advisory_xact_lock(hashtextextended('thermostat.pod-actions-feed', 0));

-- name: insert_action
INSERT INTO pod_actions (id, pod_name, action, pod_id, gpu_id, price_per_hour, http_status, ok, trigger, detail,
                         stop_id)
VALUES (:id, :pod_name, :action, :pod_id, :gpu_id, :price_per_hour, :http_status, :ok, :trigger, :detail, :stop_id);

-- name: history_page
-- Billable actions and wake outcomes of one pod, newest first, keyset-paginated on (at, id).
SELECT kind, at, id, row FROM (
    SELECT 'action' AS kind, at, id::text AS id, to_jsonb(a) AS row FROM pod_actions a WHERE pod_name = :pod_name
    UNION ALL
    SELECT 'wake', requested_at, attempt_id::text, to_jsonb(w) - 'result' - 'holder' FROM pod_wakes w
    WHERE pod_name = :pod_name
) entries
WHERE (:before_at::timestamptz IS NULL OR (at, id) < (:before_at::timestamptz, :before_id::text))
ORDER BY at DESC, id DESC
LIMIT :limit;

-- name: newest_wake
SELECT attempt_id, pod_name, requested_at, completed_at, outcome, wake_outcome, reason, pod_id, gpu_id,
       price_per_hour, candidates_considered, last_provider_status, trigger
FROM pod_wakes WHERE pod_name = :pod_name ORDER BY requested_at DESC LIMIT 1;

-- name: pod_order_lock
-- Taken (to the end of the transaction) before a wake or a stop stamps itself: stamps read from the clock
-- under it are in the order their rows become visible, on every replica.
SELECT pg_advisory_xact_lock(hashtextextended('thermostat.pod-order:' || lower(:pod_name), 0));

-- name: insert_wake
-- Under pod_order_lock. Fails with a unique violation while another wake of the pod is in flight.
INSERT INTO pod_wakes (attempt_id, pod_name, holder, trigger, requested_at)
VALUES (:attempt_id, :pod_name, :holder, :trigger, clock_timestamp())
RETURNING requested_at;

-- name: begin_stop
-- Under pod_order_lock: the stop is issued now, before RunPod is asked.
INSERT INTO pod_stops (stop_id, pod_name, trigger, issued_at) VALUES (:stop_id, :pod_name, :trigger, clock_timestamp());

-- name: settle_stop
UPDATE pod_stops SET settled_at = now(), accepted_pod_ids = :accepted_pod_ids WHERE stop_id = :stop_id;

-- name: complete_wake
UPDATE pod_wakes SET completed_at = now(), outcome = :outcome, wake_outcome = :wake_outcome, reason = :reason,
    pod_id = :pod_id, gpu_id = :gpu_id, price_per_hour = :price_per_hour,
    candidates_considered = :candidates_considered, last_provider_status = :last_provider_status, result = :result
WHERE attempt_id = :attempt_id AND completed_at IS NULL;

-- name: abandon_wakes
-- A wake whose replica lost its lease (crashed) is closed so that the next one can run.
UPDATE pod_wakes SET completed_at = now(), outcome = 'Failed', wake_outcome = 'Exception',
    reason = 'abandoned: the replica running it stopped before it completed'
WHERE pod_name = :pod_name AND completed_at IS NULL
RETURNING attempt_id;

-- name: in_flight_wake
SELECT attempt_id, holder, requested_at FROM pod_wakes WHERE pod_name = :pod_name AND completed_at IS NULL;

-- name: wake_result
SELECT completed_at, result FROM pod_wakes WHERE attempt_id = :attempt_id;

-- name: wake_completed_since
-- A wake that completed after a joiner arrived: it ran (at least its end) after the joiner asked, so its
-- result answers the joiner too.
SELECT attempt_id, result FROM pod_wakes
WHERE pod_name = :pod_name AND completed_at >= :arrival AND result IS NOT NULL
ORDER BY completed_at DESC LIMIT 1;

-- name: stops_around_wake
-- The pod's stops a wake requested at :requested_at answers to: every one issued after it, and those issued
-- before it that are still open within the settle bound. A Stop written without its stop row (a store
-- blip when it was issued) counts as issued when it was recorded. `now` is the database's clock.
SELECT issued_at, trigger, settled_at IS NOT NULL AS settled, accepted_pod_ids, now() AS now FROM pod_stops
WHERE pod_name = :pod_name
  AND (issued_at > :requested_at
       OR (settled_at IS NULL AND issued_at > now() - make_interval(secs => :settle_seconds)))
UNION ALL
SELECT at, trigger, true, ARRAY[pod_id], now() FROM pod_actions
WHERE pod_name = :pod_name AND action = 'Stop' AND ok AND stop_id IS NULL AND at >= :requested_at;

-- name: db_now
SELECT now();

-- name: set_readiness
-- Under feed_lock, once the report's incarnation was checked against the record (readiness_fence).
INSERT INTO pod_readiness (pod_name, pod_id, ready_since) VALUES (:pod_name, :pod_id, :ready_since)
ON CONFLICT (pod_name, pod_id) DO UPDATE SET ready_since = excluded.ready_since
WHERE pod_readiness.ready_since IS DISTINCT FROM excluded.ready_since
RETURNING pod_name;

-- name: incarnation
-- One pod id's incarnation (see incarnations); 0 when no accepted action names it.
SELECT COALESCE(max(position), 0) FROM pod_actions WHERE pod_name = :pod_name AND pod_id = :pod_id AND ok;

-- name: clear_readiness
DELETE FROM pod_readiness WHERE pod_name = :pod_name AND (:pod_id::text IS NULL OR pod_id = :pod_id);

-- name: readiness
SELECT ready_since FROM pod_readiness WHERE pod_name = :pod_name AND pod_id = :pod_id;

-- name: incarnations
-- Per pod id, the position of the newest accepted action that began or ended its process (every action is one).
SELECT pod_id, max(position) AS incarnation FROM pod_actions
WHERE pod_name = :pod_name AND pod_id = ANY(:pod_ids::text[]) AND ok GROUP BY pod_id;

-- name: latest_wake_before
-- The newest wake requested before a pod became ready: its start is where the boot is measured from.
SELECT attempt_id, requested_at, gpu_id FROM pod_wakes
WHERE pod_name = :pod_name AND requested_at <= :ready_since
  AND (pod_id = :pod_id OR pod_id IS NULL OR completed_at IS NULL)
ORDER BY requested_at DESC LIMIT 1;

-- name: created_gpu
-- The GPU type a pod was created on: a stopped pod restarts on its machine, so the type holds for its life.
SELECT gpu_id FROM pod_actions
WHERE pod_name = :pod_name AND pod_id = :pod_id AND action = 'Create' AND gpu_id IS NOT NULL
ORDER BY at DESC LIMIT 1;

-- name: last_accepted_action
-- The last call RunPod accepted that names a pod: what the record says the pod is doing (adoption.py).
SELECT action FROM pod_actions WHERE pod_name = :pod_name AND pod_id = :pod_id AND ok
ORDER BY at DESC, position DESC NULLS LAST LIMIT 1;

-- name: last_rate
-- The newest rate recorded for a pod id (its create's price, a start's cost): what metering prices its next start at.
SELECT price_per_hour FROM pod_actions
WHERE pod_name = :pod_name AND pod_id = :pod_id AND ok AND price_per_hour IS NOT NULL AND price_per_hour > 0
ORDER BY position DESC NULLS LAST, at DESC LIMIT 1;

-- name: insert_boot
INSERT INTO pod_boots (pod_name, pod_id, gpu_id, attempt_id, ready_at, duration_seconds)
VALUES (:pod_name, :pod_id, :gpu_id, :attempt_id, :ready_at, :duration_seconds) ON CONFLICT DO NOTHING;

-- name: recent_boots
SELECT gpu_id, duration_seconds FROM pod_boots WHERE pod_name = :pod_name ORDER BY ready_at DESC LIMIT :limit;

-- name: billable_actions_after
SELECT position, id, pod_name, action, pod_id, gpu_id, price_per_hour, http_status, ok, trigger, detail, at
FROM pod_actions WHERE position > :after ORDER BY position LIMIT :limit;

-- name: billable_head
SELECT COALESCE(max(position), 0) FROM pod_actions;

-- name: known_pod_names
-- Every pod name an action was ever recorded for: the orphan sweep's names for pods no longer configured.
SELECT DISTINCT pod_name FROM pod_actions;

-- name: billing_pod_ids
-- The pods of a name the record bills: those whose last billing call on record (accepted, or a stop or terminate
-- RunPod answered 404, or a Gone) opened their billing. As metering's pod_spend folds them.
SELECT pod_id FROM (
    SELECT DISTINCT ON (pod_id) pod_id, action FROM pod_actions
    WHERE pod_name = :pod_name AND pod_id <> '' AND (ok OR (action IN ('Stop', 'Terminate') AND http_status = 404))
    ORDER BY pod_id, position DESC NULLS LAST, at DESC
) last WHERE action IN ('Start', 'Create');

-- name: insert_gone
-- A pod confirmed gone, recorded once: only while its last billing call on record opens its billing, under the
-- feed lock (taken first in the same transaction), so two replicas that both found it gone write one record.
INSERT INTO pod_actions (id, pod_name, action, pod_id, ok, trigger, detail)
SELECT :id, :pod_name, 'Gone', :pod_id, true, 'observe', :detail
WHERE (
    SELECT action FROM pod_actions
    WHERE pod_name = :pod_name AND pod_id = :pod_id AND (ok OR (action IN ('Stop', 'Terminate') AND http_status = 404))
    ORDER BY position DESC NULLS LAST, at DESC LIMIT 1
) IN ('Start', 'Create')
RETURNING id;
