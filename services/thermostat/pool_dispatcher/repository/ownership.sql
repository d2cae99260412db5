-- Ownership of the pool's rows across processes: lapsed instances, their reclaim, and a restart taking its own
-- rows back. Owned by repository/ownership.py.

-- name: lapsed_owners
-- Instances other than this one whose lease has lapsed (database clock) or moved to another term, and
-- which still own rows.
SELECT DISTINCT owner, owner_term FROM (
    SELECT owner, owner_term FROM pool_jobs WHERE owner IS NOT NULL AND state IN ('dispatched', 'running')
    UNION
    SELECT owner, owner_term FROM pool_machines
) AS owned
WHERE owner <> $1 AND NOT EXISTS (
    SELECT 1 FROM leases l
    WHERE l.name = 'pool-instance:' || owned.owner AND l.holder = owned.owner AND l.term = owned.owner_term
      AND l.expires_at > now()
);

-- name: reclaim
-- Take over a lapsed instance's rows: its dispatched and running jobs fail with the reason (no usage:
-- they never reported), its machines become this process's to stop. The lapse is judged again inside the
-- statement, so an instance that renewed since lapsed_owners read it keeps its rows.
WITH lapsed AS (
    SELECT 1 WHERE NOT EXISTS (
        SELECT 1 FROM leases l
        WHERE l.name = 'pool-instance:' || $1 AND l.holder = $1 AND l.term = $2 AND l.expires_at > now())
), failed AS (
    UPDATE pool_jobs
    SET state = 'failed', completed_at = now(), payload = NULL, owner = NULL, owner_term = NULL,
        error = 'dispatcher instance ' || $1 || ' stopped answering (its lease lapsed) while the job was in flight'
    WHERE owner = $1 AND owner_term = $2 AND state IN ('dispatched', 'running') AND EXISTS (SELECT 1 FROM lapsed)
    RETURNING id, pg_notify('pool_jobs_done', id::text) IS NULL AS notified
), machines AS (
    UPDATE pool_machines
    SET state = 'stopping', owner = $3, owner_term = $4, job_id = NULL,
        last_error = 'reclaimed from dispatcher instance ' || $1
    WHERE owner = $1 AND owner_term = $2 AND EXISTS (SELECT 1 FROM lapsed)
    RETURNING id
)
SELECT (SELECT count(*) FROM failed) AS jobs, (SELECT count(*) FROM machines) AS machines;

-- name: recover_own
-- On start under an instance id that owned rows: fail its in-flight jobs (they were lost with the old
-- process) and set its machines stopping unless warm (the caller probes the warm ones). $3: rows of any
-- earlier term of the id (on start); false on shutdown, so an old incarnation that resumes and shuts down
-- touches only its own term's rows, never the newer incarnation's.
WITH failed AS (
    UPDATE pool_jobs
    SET state = 'failed', completed_at = now(), payload = NULL, owner = NULL, owner_term = NULL,
        error = 'dispatcher instance ' || $1 || ' stopped or restarted while the job was in flight'
    WHERE owner = $1 AND ($3 OR owner_term = $2) AND state IN ('dispatched', 'running')
    RETURNING id, pg_notify('pool_jobs_done', id::text) IS NULL AS notified
), machines AS (
    UPDATE pool_machines
    SET owner_term = $2, job_id = NULL,
        state = CASE WHEN state = 'warm' THEN 'warm' ELSE 'stopping' END
    WHERE owner = $1 AND ($3 OR owner_term = $2)
    RETURNING id
)
SELECT (SELECT count(*) FROM failed) AS jobs, (SELECT count(*) FROM machines) AS machines;
