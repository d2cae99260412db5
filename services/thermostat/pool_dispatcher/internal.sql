-- name: usage_after
-- Every tenant's usage events after a position (metering's feed), with when each was recorded.
SELECT position, job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds, started_at,
       ended_at, recorded_at
FROM pool_usage WHERE position > $1
ORDER BY position
LIMIT $2;

-- name: usage_head
-- The greatest position visible and the database clock the settle window is measured on.
SELECT COALESCE((SELECT max(position) FROM pool_usage), 0) AS head, clock_timestamp() AS now;
