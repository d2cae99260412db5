-- What the pool serves metering (the usage and machine-life feeds) and the budget refusals it records.

-- name: usage_after
-- Every tenant's usage events after a position (metering's feed), with when each was recorded.
SELECT position, job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds, started_at,
       ended_at, recorded_at
FROM pool_usage WHERE position > :after
ORDER BY position
LIMIT :limit;

-- name: usage_head
-- The greatest position visible and the database clock the settle window is measured on.
SELECT COALESCE((SELECT max(position) FROM pool_usage), 0) AS head, clock_timestamp() AS now;

-- name: machine_events_after
-- Every machine's boot and stop after a position (metering's machine-life feed), with when each was recorded.
SELECT position, machine_id, tenant_id, machine_type, event, at, recorded_at
FROM pool_machine_events WHERE position > :after
ORDER BY position
LIMIT :limit;

-- name: machine_events_head
SELECT COALESCE((SELECT max(position) FROM pool_machine_events), 0) AS head, clock_timestamp() AS now;

-- name: record_refusal
-- A submit refused for the tenant's budget, on the record as a job that failed before it was queued (no payload
-- kept, never dispatched): GET /v1/jobs/{id} shows the error with the numbers that decided it.
INSERT INTO pool_jobs (id, tenant_id, machine_type, state, priority, session_id, timeout_seconds, error,
                       completed_at)
VALUES (:job_id, :tenant_id, :machine_type, 'failed', :priority, :session_id, :timeout_seconds, :error, now());

-- name: acknowledge_feed
-- The position metering's ledger landed a feed ('usage' or 'machines') through, as its reader says with each page
-- request; it never goes back (a stale reader's older word moves nothing), and an unchanged one
-- writes nothing.
INSERT INTO pool_feed_acks AS a (feed, position) VALUES (:feed, :position)
ON CONFLICT (feed) DO UPDATE SET position = excluded.position, acknowledged_at = now()
    WHERE a.position < excluded.position;
