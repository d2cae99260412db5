-- Ownership of the pool's rows across processes: lapsed instances, their reclaim, and a restart taking its own
-- rows back. Owned by repository/ownership.py.

-- name: lapsed_owners
-- Instances other than this one whose lease has lapsed (database clock) or moved to another term, and
-- which still own rows. Released machines (a deploy's: release_own) are no lapsed instance's: they wait for
-- adoption, not reclaim.
SELECT DISTINCT owner, owner_term FROM (
    SELECT owner, owner_term FROM pool_jobs WHERE owner IS NOT NULL AND state IN ('dispatched', 'running')
    UNION
    SELECT owner, owner_term FROM pool_machines WHERE released_at IS NULL
) AS owned
WHERE owner <> :owner AND NOT EXISTS (
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
        WHERE l.name = 'pool-instance:' || :lapsed_owner AND l.holder = :lapsed_owner AND l.term = :lapsed_term
          AND l.expires_at > now())
), failed AS (
    UPDATE pool_jobs
    SET state = 'failed', completed_at = now(), payload = NULL, owner = NULL, owner_term = NULL,
        error = 'dispatcher instance ' || :lapsed_owner
                || ' stopped answering (its lease lapsed) while the job was in flight'
    WHERE owner = :lapsed_owner AND owner_term = :lapsed_term AND state IN ('dispatched', 'running')
      AND EXISTS (SELECT 1 FROM lapsed)
    RETURNING id, pg_notify('pool_jobs_done', id::text) IS NULL AS notified
), machines AS (
    UPDATE pool_machines
    SET state = 'stopping', owner = :owner, owner_term = :owner_term, job_id = NULL,
        last_error = 'reclaimed from dispatcher instance ' || :lapsed_owner
    WHERE owner = :lapsed_owner AND owner_term = :lapsed_term AND released_at IS NULL
      AND EXISTS (SELECT 1 FROM lapsed)
    RETURNING id
)
SELECT (SELECT count(*) FROM failed) AS jobs, (SELECT count(*) FROM machines) AS machines;

-- name: recover_own
-- On start under an instance id that owned rows: its in-flight jobs fail (lost with the old process), its machines stop
-- unless warm (probed next); on shutdown (:any_term false) only this term's rows. Released machines wait for adoption.
WITH failed AS (
    UPDATE pool_jobs
    SET state = 'failed', completed_at = now(), payload = NULL, owner = NULL, owner_term = NULL,
        error = 'dispatcher instance ' || :owner || ' stopped or restarted while the job was in flight'
    WHERE owner = :owner AND (:any_term OR owner_term = :owner_term) AND state IN ('dispatched', 'running')
    RETURNING id, pg_notify('pool_jobs_done', id::text) IS NULL AS notified
), machines AS (
    UPDATE pool_machines
    SET owner_term = :owner_term, job_id = NULL,
        state = CASE WHEN state = 'warm' THEN 'warm' ELSE 'stopping' END
    WHERE owner = :owner AND (:any_term OR owner_term = :owner_term) AND released_at IS NULL
    RETURNING id
)
SELECT (SELECT count(*) FROM failed) AS jobs, (SELECT count(*) FROM machines) AS machines;

-- name: release_own
-- A deploy's shutdown, after its drain: unsent jobs queue again in place (their machines warm), running ones fail with
-- :running_error (never run twice), starting and mid-job machines stop, warm ones are released for adoption.
WITH unsent AS (
    SELECT id FROM pool_jobs WHERE owner = :owner AND owner_term = :owner_term AND state = 'dispatched' FOR UPDATE
), requeued AS (
    UPDATE pool_jobs SET state = 'queued', worker_id = NULL, owner = NULL, owner_term = NULL, started_at = NULL
    WHERE id IN (SELECT id FROM unsent)
    RETURNING id
), failed AS (
    UPDATE pool_jobs
    SET state = 'failed', completed_at = now(), payload = NULL, owner = NULL, owner_term = NULL, error = :running_error
    WHERE owner = :owner AND owner_term = :owner_term AND state = 'running'
    RETURNING id, pg_notify('pool_jobs_done', id::text) IS NULL AS notified
), machines AS (
    UPDATE pool_machines
    SET state = CASE WHEN state = 'warm' OR (state = 'busy' AND job_id IN (SELECT id FROM unsent)) THEN 'warm'
                     ELSE 'stopping' END,
        released_at = CASE WHEN state = 'warm' OR (state = 'busy' AND job_id IN (SELECT id FROM unsent)) THEN now()
                      END,
        job_id = NULL,
        last_error = CASE WHEN state = 'warm' OR (state = 'busy' AND job_id IN (SELECT id FROM unsent))
                          THEN last_error ELSE 'dispatcher ' || :owner || ' shut down mid-boot or mid-job' END
    WHERE owner = :owner AND owner_term = :owner_term AND state IN ('starting', 'warm', 'busy')
    RETURNING id, state
)
SELECT (SELECT count(*) FROM requeued) AS requeued, (SELECT count(*) FROM failed) AS failed,
       (SELECT count(*) FROM machines WHERE state = 'stopping') AS stopping,
       (SELECT count(*) FROM machines WHERE state = 'warm') AS released,
       (SELECT pg_notify('pool_machines_released', :owner) FROM machines WHERE state = 'warm' LIMIT 1) IS NULL
           AS notified;

-- name: released_machines
-- Machines released by a deploy and not yet adopted, with where they are, to probe before adopting them.
SELECT id, tenant_id, machine_type, image, state, session_id, health_misses, cool_down_seconds, job_id,
       provider_id, endpoint, region, backend, yield_to,
       GREATEST(0, extract(epoch FROM now() - idle_since))::double precision AS idle_seconds
FROM pool_machines WHERE released_at IS NOT NULL ORDER BY released_at, id LIMIT :limit;

-- name: adopt_released
-- Take a released machine under this process's owner and term: warm with its idle clock (:healthy: it answered its
-- probe) or stopping (it did not: the caller stops it, never reuses it). Whoever adopts first has it; another
-- adopter's statement finds no released row and answers nothing.
UPDATE pool_machines
SET owner = :owner, owner_term = :owner_term, released_at = NULL, health_misses = 0,
    state = CASE WHEN :healthy THEN state ELSE 'stopping' END,
    last_error = CASE WHEN :healthy THEN last_error ELSE 'no health answer when adopted after a deploy' END
WHERE id = :machine_id AND released_at IS NOT NULL AND state = 'warm'
RETURNING id, state, provider_id, GREATEST(0, extract(epoch FROM now() - idle_since))::double precision AS idle_seconds;
