-- The pool's machines: placement's lock and counts, insert, boot, ready, retire, stop, health and the reads.
-- Owned by repository/machines.py. Every write to an owned row matches the instance id and lease term.

-- name: machine_hold
-- A machine of this process after a write whose answer was lost: its state and the live job it holds under
-- this owner and term (with the payload, to resume it); no row when the machine is no longer this process's.
SELECT m.state AS machine_state, m.endpoint, m.token, m.provider_id, j.state AS job_state,
       j.id, j.payload, j.timeout_seconds, j.traceparent, j.tracestate, j.submitted_at
FROM pool_machines m
LEFT JOIN pool_jobs j ON j.id = m.job_id AND j.worker_id = m.id AND j.owner = :owner AND j.owner_term = :owner_term
    AND j.state IN ('dispatched', 'running')
WHERE m.id = :machine_id AND m.owner = :owner AND m.owner_term = :owner_term;

-- name: lock_placement
-- "Count the queue and insert the machine rows" runs under one lock across every process.
SELECT pg_advisory_xact_lock(7310010);

-- name: demand
-- Queued jobs per tenant and type, with the first in line, and the tenant's last rotation out (pool_fair_turns).
SELECT DISTINCT ON (j.tenant_id, j.machine_type)
       j.tenant_id, j.machine_type, count(*) OVER (PARTITION BY j.tenant_id, j.machine_type) AS queued,
       j.id, j.priority, j.queue_seq, COALESCE(t.after_seq, 0) AS turn
FROM pool_jobs j LEFT JOIN pool_fair_turns t ON t.tenant_id = j.tenant_id
WHERE j.state = 'queued'
ORDER BY j.tenant_id, j.machine_type, j.priority DESC, j.queue_seq;

-- name: fleet
-- Every machine, as the placement and hint policies see it. Since its boot ended (`held_seconds`) and how long its
-- boot took (`boot_seconds`), by the database's clock: rotation's tenure (thermostat.policy.pool.rotation).
SELECT id, tenant_id, machine_type, image, state, session_id, health_misses, cool_down_seconds, job_id, yield_to,
       GREATEST(0, extract(epoch FROM clock_timestamp() - warm_at))::double precision AS held_seconds,
       GREATEST(0, extract(epoch FROM warm_at - created_at))::double precision AS boot_seconds
FROM pool_machines;

-- name: record_turn
-- A tenant rotated out at the fleet cap: its wait for the next slot begins now in the jobs' submission order, as if
-- it queued anew (the sequence the next job submitted gets, so behind every job already queued).
INSERT INTO pool_fair_turns (tenant_id, after_seq)
SELECT :tenant_id, last_value + 1 FROM pool_jobs_queue_seq_seq
ON CONFLICT (tenant_id) DO UPDATE SET after_seq = EXCLUDED.after_seq;

-- name: insert_machine
-- A machine about to start, owned by this process, its token minted before boot; the first queued job in
-- line for its tenant and type (if :assign_job) is assigned to it.
WITH first AS (
    SELECT id FROM pool_jobs
    WHERE state = 'queued' AND tenant_id = :tenant_id AND machine_type = :machine_type AND :assign_job
    ORDER BY priority DESC, queue_seq
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), assigned AS (
    UPDATE pool_jobs j SET state = 'dispatched', worker_id = :machine_id, owner = :owner, owner_term = :owner_term
    FROM first WHERE j.id = first.id
    RETURNING j.id, j.traceparent, j.tracestate
), machine AS (
    INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, owner, owner_term,
                               cool_down_seconds, job_id)
    VALUES (:machine_id, :tenant_id, :machine_type, :image, :backend, :token, 'starting', :owner, :owner_term,
            :cool_down_seconds, (SELECT id FROM assigned))
    RETURNING id
)
SELECT assigned.id AS job_id, assigned.traceparent, assigned.tracestate
FROM machine LEFT JOIN assigned ON true;

-- name: record_started
-- The provider started the machine: where it is. Matched on owner, so a machine reclaimed meanwhile is
-- not recorded (the caller stops it).
UPDATE pool_machines SET provider_id = :provider_id, endpoint = :endpoint, region = :region
WHERE id = :machine_id AND owner = :owner AND owner_term = :owner_term AND state = 'starting'
RETURNING id;

-- name: machine_ready
-- The machine answered its health check: its dispatched job is handed to it (sent after mark_sent), unless
-- it was cancelled in between (then the machine is warm for the next job).
WITH job AS (
    UPDATE pool_jobs j
    SET state = 'dispatched'  -- unchanged: the row is locked and read; mark_sent flips it to running
    FROM pool_machines m
    WHERE m.id = :machine_id AND j.id = m.job_id AND j.state = 'dispatched'
      AND j.owner = :owner AND j.owner_term = :owner_term
    RETURNING j.id, j.payload, j.timeout_seconds, j.traceparent, j.tracestate, j.session_id, j.submitted_at
), machine AS (
    UPDATE pool_machines m
    SET state = CASE WHEN EXISTS (SELECT 1 FROM job) THEN 'busy' ELSE 'warm' END,
        job_id = (SELECT id FROM job),
        session_id = (SELECT session_id FROM job),
        warm_at = now(), last_active_at = now()
    WHERE m.id = :machine_id AND m.owner = :owner AND m.owner_term = :owner_term AND m.state = 'starting'
    RETURNING m.state
)
SELECT machine.state AS machine_state, job.*
FROM machine LEFT JOIN job ON true;

-- name: boot_failed
-- A machine that did not start or boot goes; its dispatched job queues again carrying :reason (the provider's
-- message), or fails if its type left the stored catalogue meanwhile, as queued jobs of a removed type do.
WITH machine AS (
    DELETE FROM pool_machines WHERE id = :machine_id AND owner = :owner AND owner_term = :owner_term
    RETURNING id
), job AS (
    SELECT j.id, EXISTS (
        SELECT 1 FROM pool_catalogue c WHERE NOT c.types @> jsonb_build_array(jsonb_build_object('name', j.machine_type))
    ) AS removed
    FROM pool_jobs j WHERE j.worker_id IN (SELECT id FROM machine) AND j.state = 'dispatched'
    FOR UPDATE OF j
)
UPDATE pool_jobs j
SET state = CASE WHEN job.removed THEN 'failed' ELSE 'queued' END,
    completed_at = CASE WHEN job.removed THEN now() END,
    payload = CASE WHEN job.removed THEN NULL ELSE j.payload END,
    error = CASE WHEN job.removed THEN 'machine type ' || j.machine_type || ' was removed from the catalogue'
                 ELSE :reason END,
    worker_id = NULL, owner = NULL, owner_term = NULL
FROM job WHERE j.id = job.id
RETURNING j.id, j.state, CASE WHEN job.removed THEN pg_notify('pool_jobs_done', j.id::text) IS NULL END AS notified;

-- name: retire
-- Set an idle (warm) or named machine of this process to stopping; a busy one is never retired here.
UPDATE pool_machines SET state = 'stopping', last_error = :reason
WHERE id = :machine_id AND owner = :owner AND owner_term = :owner_term AND state = ANY(:states::text[])
RETURNING provider_id;

-- name: yield_machine
-- Give a machine's slot up, under placement's lock, for whichever process planned it (policy/pool/fair_share, or room
-- under the tenant cap): a warm one is retired and becomes this process's to stop, as reclaim takes one; a busy one is
-- only marked (:mark_busy) to yield to :to_tenant after its job. The state is read at the row, so a race lands either.
UPDATE pool_machines
SET state = CASE WHEN state = 'warm' THEN 'stopping' ELSE state END,
    owner = CASE WHEN state = 'warm' THEN :owner ELSE owner END,
    owner_term = CASE WHEN state = 'warm' THEN :owner_term::bigint ELSE owner_term END,
    yield_to = CASE WHEN state = 'busy' THEN :to_tenant ELSE yield_to END,
    last_error = CASE WHEN state = 'warm' THEN :reason ELSE last_error END
WHERE id = :machine_id AND (state = 'warm' OR (state = 'busy' AND :mark_busy))
RETURNING state, provider_id;

-- name: unyield
-- Fair share no longer needs these machines' slots (the waiting job was cancelled, or another slot came free):
-- their marks go and each goes on with its tenant's backlog. A machine whose completion already retired it stays
-- stopping. :machine_ids NULL: every marked machine, when nothing is queued at all.
UPDATE pool_machines SET yield_to = NULL
WHERE (:machine_ids::uuid[] IS NULL OR id = ANY(:machine_ids::uuid[])) AND yield_to IS NOT NULL AND state <> 'stopping'
RETURNING id;

-- name: stopping
-- This process's machines whose stop has not finished (a failed stop is retried on the next pass).
SELECT id, provider_id FROM pool_machines WHERE owner = :owner AND owner_term = :owner_term AND state = 'stopping';

-- name: forget_machine
-- The machine is stopped: its row goes.
DELETE FROM pool_machines WHERE id = :machine_id AND owner = :owner AND owner_term = :owner_term AND state = 'stopping';

-- name: record_misses
UPDATE pool_machines SET health_misses = :health_misses
WHERE id = :machine_id AND owner = :owner AND owner_term = :owner_term AND state = 'warm';

-- name: own_machines
-- This process's machines, with where they are and on which backend (for probes and stops; never leaves
-- the service). `idle_seconds`: how long a warm machine has been idle by its row's clock (idle_since, kept by the
-- database across processes: migration 0019), which seeds this process's monotonic idle clock for the reaper.
SELECT id, tenant_id, machine_type, image, state, session_id, health_misses, cool_down_seconds, job_id,
       provider_id, endpoint, region, backend, yield_to,
       GREATEST(0, extract(epoch FROM now() - idle_since))::double precision AS idle_seconds
FROM pool_machines WHERE owner = :owner AND owner_term = :owner_term AND released_at IS NULL;

-- name: starting_machines
-- This process's starting machines, with what a boot needs (the token the worker is started with, the job
-- handed to it and that job's trace headers) and whether a provider start was recorded: the scaler pass
-- boots the ones a placement inserted whose answer was lost (thermostat.policy.pool.unbooted).
SELECT m.id, m.tenant_id, m.machine_type, m.image, m.state, m.session_id, m.health_misses, m.cool_down_seconds,
       m.yield_to, m.token, m.backend, m.provider_id, j.id AS job_id, j.traceparent, j.tracestate
FROM pool_machines m
LEFT JOIN pool_jobs j ON j.id = m.job_id AND j.worker_id = m.id AND j.state = 'dispatched'
WHERE m.owner = :owner AND m.owner_term = :owner_term AND m.state = 'starting';

-- name: machine_backend
-- Which backend a machine is on, to stop it there (stops are rare: one read each, off the hot path).
SELECT backend FROM pool_machines WHERE id = :machine_id;

-- name: machine_address
-- Where a machine is and its token, to post a cancel to it.
SELECT endpoint, token FROM pool_machines WHERE id = :machine_id;

-- name: list_workers
-- never the token: the endpoint alone does not reach a worker's /execute
SELECT id, tenant_id, machine_type, image, backend, state, region, session_id, job_id, created_at, warm_at,
       last_active_at, health_misses, provider_id, endpoint
FROM pool_machines WHERE :tenant_id::text IS NULL OR tenant_id = :tenant_id
ORDER BY created_at, id;

-- name: machine_counts
SELECT state, count(*) AS machines FROM pool_machines GROUP BY state;

-- name: machine_counts_by_backend
-- /metrics: machines by state and backend (the fleet's rows; small by the fleet cap).
SELECT state, backend, count(*) AS machines FROM pool_machines GROUP BY state, backend;

-- name: known_machines
-- Every machine row of every dispatcher process, for the orphan sweep (read after the provider's listing).
SELECT id::text AS id, provider_id FROM pool_machines;

-- name: record_orphan_stop
-- An orphan the sweep terminated; a second sweep's stop of the same machine (it was still listed) is one record.
-- The same statement puts the stop on the machine-events feed (event 'orphan-stopped', no tenant: no row knew it).
WITH stop AS (
    INSERT INTO pool_orphan_stops (backend, provider_id, name, machine_id, stopped_by)
    VALUES (:backend, :provider_id, :name, :machine_id, :stopped_by)
    ON CONFLICT (backend, provider_id) DO NOTHING
    RETURNING machine_id, at
)
INSERT INTO pool_machine_events (machine_id, tenant_id, machine_type, event, at)
SELECT machine_id, '', :machine_type, 'orphan-stopped', at FROM stop
ON CONFLICT (machine_id, event) DO NOTHING;
