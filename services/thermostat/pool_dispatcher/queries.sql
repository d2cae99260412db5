-- The pool dispatcher's SQL, owned by repository.py. $me / $term are the process's instance id and the term
-- of its instance lease; every write to an owned row matches both.

-- name: submit
-- Insert the job and, in the same statement, hand it to the best warm machine of the tenant, type and
-- current image (session affinity first, then most recently active, then the id: the one rule for which warm
-- machine takes a job, tests/integration/pool_dispatcher/test_warm_choice.py; `IS TRUE`: a machine with no
-- session compares NULL, which DESC would sort before the affine one) unless a queued job of that tenant and
-- type with at least this priority is ahead of it. Claimed, the job is this process's on that machine and
-- goes out right after the answer. $13 (send now: the lease was trusted for the call before the statement):
-- this statement is the job's conditional send, `running` from here with no mark_sent. About as safe (the
-- window between statement and send is one answer long, as between mark_sent and its send or a hand-off):
-- the id is new with this statement, so no cancel can name the job before it answers, and a lapsing
-- lease is caught by the trust check before the statement, as for a completion's hand-off. Without $13 it is
-- `dispatched`, and mark_sent's own check decides (it requeues). Not claimed: queued, and `live` / `idle`
-- (the tenant's machines of the type: starting, warm or busy / warm) say whether placement could act on it
-- (thermostat.policy.pool.placement). $14: the channel of this process's sync wait for the job (NULL: no sync
-- wait), which a completion in another process notifies. $7 is cast to its base type: left to take the column's
-- domain (migration 0016), it would be received through the domain's own check on every call, besides the check
-- the write makes. `queued`: the tenant's queued jobs of the type ahead of a job that queued, counted up to $15
-- (thermostat.policy.pool.submit_batch: whether the next submit may wait for a batch).
WITH ahead AS (
    SELECT 1 FROM pool_jobs
    WHERE state = 'queued' AND tenant_id = $2 AND machine_type = $3 AND priority >= $5
    LIMIT 1
), machine AS (
    SELECT id FROM pool_machines
    WHERE state = 'warm' AND tenant_id = $2 AND machine_type = $3 AND image = $4
      AND NOT EXISTS (SELECT 1 FROM ahead)
    ORDER BY ($6::text IS NOT NULL AND session_id = $6) IS TRUE DESC, last_active_at DESC NULLS LAST, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE pool_machines m
    SET state = 'busy', job_id = $1, session_id = COALESCE($6, m.session_id), last_active_at = now(),
        owner = $9, owner_term = $10
    FROM machine WHERE m.id = machine.id
    RETURNING m.id, m.endpoint, m.token
)
INSERT INTO pool_jobs AS j (id, tenant_id, machine_type, state, priority, session_id, timeout_seconds, payload,
                            started_at, worker_id, owner, owner_term, traceparent, tracestate, done_channel)
SELECT $1, $2, $3, CASE WHEN taken.id IS NULL THEN 'queued' WHEN $13 THEN 'running' ELSE 'dispatched' END,
       $5, $6, $7::double precision, $8, CASE WHEN taken.id IS NOT NULL AND $13 THEN now() END, taken.id,
       CASE WHEN taken.id IS NULL THEN NULL ELSE $9 END, CASE WHEN taken.id IS NULL THEN NULL ELSE $10::bigint END,
       $11, $12, $14
FROM (SELECT 1) AS one LEFT JOIN taken ON true
RETURNING j.id, j.tenant_id, j.machine_type, j.state, j.submitted_at, j.priority, j.session_id, j.worker_id,
          j.timeout_seconds, j.error, j.started_at, j.completed_at, false AS has_result,
          (SELECT endpoint FROM taken) AS endpoint, (SELECT token FROM taken) AS token,
          CASE WHEN j.worker_id IS NULL THEN (  -- counted only for a job that queued
              SELECT count(*) FROM pool_machines
              WHERE tenant_id = $2 AND machine_type = $3 AND state IN ('starting', 'warm', 'busy')) END AS live,
          CASE WHEN j.worker_id IS NULL THEN (
              SELECT count(*) FROM pool_machines
              WHERE tenant_id = $2 AND machine_type = $3 AND state = 'warm') END AS idle,
          CASE WHEN j.worker_id IS NULL THEN (
              SELECT count(*) FROM (
                  SELECT 1 FROM pool_jobs WHERE state = 'queued' AND tenant_id = $2 AND machine_type = $3
                  LIMIT $15) AS ahead_of_it) END AS queued;

-- name: submit_queued
-- Group commit (thermostat.policy.pool.submit_batch): queue several jobs of one tenant and type at once, one
-- row per element of the arrays ($3 ids, $4 priorities, $5 sessions, $6 timeouts, $7 payloads, $8 / $9
-- trace headers, $10 done channels), taking queue places in array order (the order the submits arrived in
-- this process). No claim: a batch is written only for a key whose last submit here queued with placement
-- unable to act; `live` / `idle` / `queued` (up to $11) are counted as the submit's are, so the service pokes
-- placement when a machine went idle meanwhile (a completion that committed before this statement, which it
-- sees as warm).
WITH batch AS (
    SELECT b.id, b.priority, b.session_id, b.timeout_seconds, b.payload, b.traceparent, b.tracestate,
           b.done_channel, b.arrival
    FROM unnest($3::uuid[], $4::bigint[], $5::text[], $6::double precision[], $7::bytea[], $8::text[],
                $9::text[], $10::text[])
         WITH ORDINALITY AS b(id, priority, session_id, timeout_seconds, payload, traceparent, tracestate,
                              done_channel, arrival)
), inserted AS (
    INSERT INTO pool_jobs AS j (id, tenant_id, machine_type, state, priority, session_id, timeout_seconds, payload,
                                traceparent, tracestate, done_channel)
    SELECT id, $1, $2, 'queued', priority, session_id, timeout_seconds, payload, traceparent, tracestate,
           done_channel
    FROM batch ORDER BY arrival
    RETURNING j.id, j.tenant_id, j.machine_type, j.state, j.submitted_at, j.priority, j.session_id, j.worker_id,
              j.timeout_seconds, j.error, j.started_at, j.completed_at, false AS has_result
)
SELECT inserted.*,
       (SELECT count(*) FROM pool_machines
        WHERE tenant_id = $1 AND machine_type = $2 AND state IN ('starting', 'warm', 'busy')) AS live,
       (SELECT count(*) FROM pool_machines
        WHERE tenant_id = $1 AND machine_type = $2 AND state = 'warm') AS idle,
       (SELECT count(*) FROM (
            SELECT 1 FROM pool_jobs WHERE state = 'queued' AND tenant_id = $1 AND machine_type = $2
            LIMIT $11) AS ahead_of_it) AS queued
FROM inserted;

-- name: complete
-- Finish a job this process ran: its terminal state (a cancel that landed first stands, and drops the
-- result), the usage event in the same statement, and the machine back to warm, to stopping when retired,
-- or straight on to the next queued job of its tenant and type (priority desc, then FIFO) when it is kept and
-- its image is current. $13: the next job is sent at once, so this statement is its conditional send (running,
-- as mark_sent would make it: the claim is fenced by owner and term like mark_sent, and the payload goes out
-- right after the answer); false: dispatched, sent after mark_sent (the lease was not trusted for the call).
-- Notified only where someone may wait in another process (this process wakes its own waiters): the channel of
-- the sync wait another process's submit recorded, with the job's id, and for a completed job whose result is
-- at most $14 bytes the result too ("<id> completed <base64>"), so that wait answers without reading the job
-- back; and every process's `pool_jobs_done` with the id when a WaitJob watches the job.
-- $1 job, $2 machine, $3 state, $4 result, $5 error, $6 duration (monotonic), $7 me, $8 term, $9 retire,
-- $10 take next, $11 tenant, $12 type, $13 send next, $14 largest result a notification carries, $15 this
-- process's own channel. $6 is cast to its base type, as the submit's $7 is.
WITH job AS (
    UPDATE pool_jobs
    SET state = CASE WHEN state = 'cancelled' THEN 'cancelled' ELSE $3 END,
        result = CASE WHEN state = 'cancelled' THEN NULL ELSE $4::bytea END,
        error = CASE WHEN state = 'cancelled' THEN error ELSE $5 END,
        completed_at = COALESCE(completed_at, now()),
        payload = NULL, owner = NULL, owner_term = NULL
    WHERE id = $1 AND worker_id = $2 AND owner = $7 AND owner_term = $8 AND state IN ('running', 'cancelled')
    RETURNING id, tenant_id, machine_type, worker_id, state, started_at, completed_at, submitted_at, priority,
              session_id, timeout_seconds, error, result IS NOT NULL AS has_result, done_channel, watched,
              COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back
), usage AS (
    INSERT INTO pool_usage (job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds,
                            started_at, ended_at)
    SELECT id, tenant_id, machine_type, worker_id, state, $6::double precision, started_at, completed_at FROM job
    ON CONFLICT (job_id) DO NOTHING
    RETURNING position
), next AS (
    SELECT id FROM pool_jobs
    WHERE state = 'queued' AND tenant_id = $11 AND machine_type = $12 AND $10 AND NOT $9
      AND EXISTS (SELECT 1 FROM job)
    ORDER BY priority DESC, queue_seq
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), handed AS (
    UPDATE pool_jobs j
    SET state = CASE WHEN $13 THEN 'running' ELSE 'dispatched' END,
        started_at = CASE WHEN $13 THEN now() END,
        worker_id = $2, owner = $7, owner_term = $8
    FROM next WHERE j.id = next.id
    RETURNING j.id, j.payload, j.timeout_seconds, j.traceparent, j.tracestate, j.session_id, j.submitted_at, j.state
), machine AS (
    UPDATE pool_machines m
    SET state = CASE WHEN $9 THEN 'stopping' WHEN EXISTS (SELECT 1 FROM handed) THEN 'busy' ELSE 'warm' END,
        job_id = (SELECT id FROM handed),
        session_id = COALESCE((SELECT session_id FROM handed), m.session_id),
        last_active_at = now()
    WHERE m.id = $2 AND m.owner = $7 AND m.owner_term = $8 AND EXISTS (SELECT 1 FROM job)
    RETURNING m.state, m.provider_id
)
SELECT job.state AS job_state, job.submitted_at AS job_submitted_at, job.priority AS job_priority,
       job.session_id AS job_session_id, job.timeout_seconds AS job_timeout_seconds, job.error AS job_error,
       job.started_at AS job_started_at, job.completed_at AS job_completed_at, job.has_result AS job_has_result,
       job.handed_back AS job_handed_back,
       (SELECT state FROM machine) AS machine_state,
       (SELECT provider_id FROM machine) AS provider_id,
       (SELECT position FROM usage) AS position,
       handed.id, handed.payload, handed.timeout_seconds, handed.traceparent, handed.tracestate,
       handed.submitted_at, handed.state = 'running' AS sent,
       (SELECT pg_notify(done_channel, id::text || CASE
            WHEN state = 'completed' AND COALESCE(octet_length($4::bytea), 0) <= $14
            THEN ' completed ' || COALESCE(encode($4::bytea, 'base64'), '') ELSE '' END)
        FROM job WHERE done_channel <> $15::text) AS notified,
       (SELECT pg_notify('pool_jobs_done', id::text) FROM job WHERE watched) AS watchers_notified
FROM (SELECT 1) AS one LEFT JOIN handed ON true LEFT JOIN job ON true;

-- name: take_next
-- Hand the next queued job of its tenant and type to an idle warm machine on the current image ($4); the
-- machine becomes this process's, as a submit's claim makes it.
WITH machine AS (
    SELECT id, tenant_id, machine_type FROM pool_machines
    WHERE id = $1 AND state = 'warm' AND image = $4
    FOR UPDATE SKIP LOCKED
), next AS (
    SELECT j.id FROM pool_jobs j, machine
    WHERE j.state = 'queued' AND j.tenant_id = machine.tenant_id AND j.machine_type = machine.machine_type
    ORDER BY j.priority DESC, j.queue_seq
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
), handed AS (
    UPDATE pool_jobs j
    SET state = 'dispatched', worker_id = $1, owner = $2, owner_term = $3
    FROM next WHERE j.id = next.id
    RETURNING j.id, j.payload, j.timeout_seconds, j.traceparent, j.tracestate, j.session_id, j.submitted_at
), busy AS (
    UPDATE pool_machines m
    SET state = 'busy', job_id = handed.id, session_id = COALESCE(handed.session_id, m.session_id),
        last_active_at = now(), owner = $2, owner_term = $3
    FROM handed WHERE m.id = $1
    RETURNING m.endpoint, m.token
)
SELECT handed.*, busy.endpoint, busy.token FROM handed, busy;

-- name: mark_sent
-- Right before the payload goes to the machine: the job is running only if it is still dispatched to this
-- machine under this process's owner and term. A cancel (or a reclaim, or a newer incarnation of this
-- instance) that landed since the claim wins: nothing is sent, nothing metered, and the machine is idle
-- again in the same statement. Idempotent per owner: a job already running on this machine under this owner
-- and term was marked by this caller's earlier attempt whose answer was lost (only the step driving the
-- machine marks it, and it sends only after the answer), so it answers sent again, keeping its start.
-- $1 job, $2 machine, $3 me, $4 term.
WITH sent AS (
    UPDATE pool_jobs SET state = 'running', started_at = CASE WHEN state = 'running' THEN started_at ELSE now() END
    WHERE id = $1 AND worker_id = $2 AND owner = $3 AND owner_term = $4 AND state IN ('dispatched', 'running')
    RETURNING id
), freed AS (
    UPDATE pool_machines SET state = 'warm', job_id = NULL, last_active_at = now()
    WHERE id = $2 AND job_id = $1 AND owner = $3 AND owner_term = $4 AND state = 'busy'
      AND NOT EXISTS (SELECT 1 FROM sent)
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM sent) AS sent, EXISTS (SELECT 1 FROM freed) AS freed;

-- name: requeue_unsent
-- This process may not send (its instance lease is not trusted for the call): the dispatched job goes back
-- to the queue in its old place, and the machine is idle. $5: the caller's own mark_sent landed (running)
-- but nothing was sent, so a running job is requeued too. $1 job, $2 machine, $3 me, $4 term.
-- The machine is freed only with its job: when the job was requeued, or is no longer live on it under this
-- owner and term (a cancel won, as in mark_sent). A job still live on it that this call may not requeue
-- (running, unmarked: a reconcile that no longer knows the claim went unanswered) keeps its machine busy, so
-- no other job is handed a machine that one is said to run on.
WITH job AS (
    UPDATE pool_jobs SET state = 'queued', worker_id = NULL, owner = NULL, owner_term = NULL, started_at = NULL
    WHERE id = $1 AND worker_id = $2 AND owner = $3 AND owner_term = $4
      AND (state = 'dispatched' OR ($5 AND state = 'running'))
    RETURNING id
), live AS (
    SELECT id FROM pool_jobs
    WHERE id = $1 AND worker_id = $2 AND owner = $3 AND owner_term = $4 AND state IN ('dispatched', 'running')
), freed AS (
    UPDATE pool_machines SET state = 'warm', job_id = NULL
    WHERE id = $2 AND job_id = $1 AND owner = $3 AND owner_term = $4 AND state = 'busy'
      AND (EXISTS (SELECT 1 FROM job) OR NOT EXISTS (SELECT 1 FROM live))
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM job) AS requeued, EXISTS (SELECT 1 FROM freed) AS freed;

-- name: refused_by
-- The machines that refused a job before now and handed it back, with why (thermostat.policy.pool.hand_back).
SELECT handed_back_from::text FROM pool_jobs WHERE id = $1;

-- name: hand_back
-- The running job's machine could not be reached before any byte was sent (thermostat.policy.pool.hand_back):
-- the machine is retired at once (stopping, as a failed probe streak retires one) and the job goes back to the
-- queue in its old place (its priority and queue_seq are untouched), this refusal appended to handed_back_from,
-- with no usage event (it ran for no time). A cancel that landed first (cancelled, still owned: it was running)
-- or a reclaim wins: nothing changes here and the caller records the end as a completion would. Written again
-- after a lost answer, it answers handed back once more: the job names this machine among its refusals and is
-- no longer on it. $1 job, $2 machine, $3 me, $4 term, $5 reason, $6 the machine's last error.
WITH job AS (
    UPDATE pool_jobs
    SET state = 'queued', worker_id = NULL, owner = NULL, owner_term = NULL, started_at = NULL,
        handed_back_from = COALESCE(handed_back_from, '[]'::jsonb)
                           || jsonb_build_array(jsonb_build_object('machine', worker_id::text, 'reason', $5::text))
    WHERE id = $1 AND worker_id = $2 AND owner = $3 AND owner_term = $4 AND state = 'running'
    RETURNING id
), earlier AS (
    SELECT 1 FROM pool_jobs
    WHERE id = $1 AND worker_id IS DISTINCT FROM $2
      AND handed_back_from @> jsonb_build_array(jsonb_build_object('machine', $2::uuid::text))
), retired AS (
    UPDATE pool_machines SET state = 'stopping', job_id = NULL, last_error = $6
    WHERE id = $2 AND job_id = $1 AND owner = $3 AND owner_term = $4 AND state = 'busy'
      AND EXISTS (SELECT 1 FROM job)
    RETURNING provider_id
)
SELECT EXISTS (SELECT 1 FROM job) OR EXISTS (SELECT 1 FROM earlier) AS handed_back,
       COALESCE((SELECT provider_id FROM retired), (
           SELECT provider_id FROM pool_machines
           WHERE id = $2 AND owner = $3 AND owner_term = $4 AND state = 'stopping' AND EXISTS (SELECT 1 FROM earlier)
       )) AS provider_id;

-- name: abandon_running
-- A running job on a busy machine of this process that no task here drives (its sender ended on an unexpected
-- error, or a reconcile no longer knows its claim went unanswered, so requeue_unsent kept it): nobody will report
-- it, so it fails with the reason (no usage: it never reported, as a reclaimed job's) and its machine, whose state
-- is unknown, is retired. $1 job, $2 machine, $3 me, $4 term, $5 reason.
WITH failed AS (
    UPDATE pool_jobs
    SET state = 'failed', completed_at = now(), payload = NULL, owner = NULL, owner_term = NULL, error = $5
    WHERE id = $1 AND worker_id = $2 AND owner = $3 AND owner_term = $4 AND state = 'running'
    RETURNING id, pg_notify('pool_jobs_done', id::text) IS NULL AS notified
), retired AS (
    UPDATE pool_machines SET state = 'stopping', job_id = NULL, last_error = $5
    WHERE id = $2 AND job_id = $1 AND owner = $3 AND owner_term = $4 AND state = 'busy'
      AND EXISTS (SELECT 1 FROM failed)
    RETURNING provider_id
)
SELECT EXISTS (SELECT 1 FROM failed) AS failed, EXISTS (SELECT 1 FROM retired) AS retired,
       (SELECT provider_id FROM retired) AS provider_id;

-- name: machine_hold
-- A machine of this process after a write whose answer was lost: its state and the live job it holds under
-- this owner and term (with the payload, to resume it); no row when the machine is no longer this process's.
-- $1 machine, $2 me, $3 term.
SELECT m.state AS machine_state, m.endpoint, m.token, m.provider_id, j.state AS job_state,
       j.id, j.payload, j.timeout_seconds, j.traceparent, j.tracestate, j.submitted_at
FROM pool_machines m
LEFT JOIN pool_jobs j ON j.id = m.job_id AND j.worker_id = m.id AND j.owner = $2 AND j.owner_term = $3
    AND j.state IN ('dispatched', 'running')
WHERE m.id = $1 AND m.owner = $2 AND m.owner_term = $3;

-- name: lock_placement
-- "Count the queue and insert the machine rows" runs under one lock across every process.
SELECT pg_advisory_xact_lock(7310010);

-- name: demand
-- Queued jobs per tenant and type, with the first in line.
SELECT DISTINCT ON (tenant_id, machine_type)
       tenant_id, machine_type, count(*) OVER (PARTITION BY tenant_id, machine_type) AS queued,
       id, priority, queue_seq
FROM pool_jobs
WHERE state = 'queued'
ORDER BY tenant_id, machine_type, priority DESC, queue_seq;

-- name: fleet
-- Every machine, as the placement and hint policies see it.
SELECT id, tenant_id, machine_type, image, state, session_id, health_misses, cool_down_seconds, job_id
FROM pool_machines;

-- name: insert_machine
-- A machine about to start, owned by this process, its token minted before boot; the first queued job in
-- line for its tenant and type (if $9) is assigned to it.
WITH first AS (
    SELECT id FROM pool_jobs
    WHERE state = 'queued' AND tenant_id = $2 AND machine_type = $3 AND $9
    ORDER BY priority DESC, queue_seq
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), assigned AS (
    UPDATE pool_jobs j SET state = 'dispatched', worker_id = $1, owner = $7, owner_term = $8
    FROM first WHERE j.id = first.id
    RETURNING j.id, j.traceparent, j.tracestate
), machine AS (
    INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, owner, owner_term,
                               cool_down_seconds, job_id)
    VALUES ($1, $2, $3, $4, $5, $6, 'starting', $7, $8, $10, (SELECT id FROM assigned))
    RETURNING id
)
SELECT assigned.id AS job_id, assigned.traceparent, assigned.tracestate
FROM machine LEFT JOIN assigned ON true;

-- name: record_started
-- The provider started the machine: where it is. Matched on owner, so a machine reclaimed meanwhile is
-- not recorded (the caller stops it).
UPDATE pool_machines SET provider_id = $2, endpoint = $3, region = $4
WHERE id = $1 AND owner = $5 AND owner_term = $6 AND state = 'starting'
RETURNING id;

-- name: machine_ready
-- The machine answered its health check: its dispatched job is handed to it (sent after mark_sent), unless
-- it was cancelled in between (then the machine is warm for the next job).
WITH job AS (
    UPDATE pool_jobs j
    SET state = 'dispatched'  -- unchanged: the row is locked and read; mark_sent flips it to running
    FROM pool_machines m
    WHERE m.id = $1 AND j.id = m.job_id AND j.state = 'dispatched' AND j.owner = $2 AND j.owner_term = $3
    RETURNING j.id, j.payload, j.timeout_seconds, j.traceparent, j.tracestate, j.session_id, j.submitted_at
), machine AS (
    UPDATE pool_machines m
    SET state = CASE WHEN EXISTS (SELECT 1 FROM job) THEN 'busy' ELSE 'warm' END,
        job_id = (SELECT id FROM job),
        session_id = (SELECT session_id FROM job),
        warm_at = now(), last_active_at = now()
    WHERE m.id = $1 AND m.owner = $2 AND m.owner_term = $3 AND m.state = 'starting'
    RETURNING m.state
)
SELECT machine.state AS machine_state, job.*
FROM machine LEFT JOIN job ON true;

-- name: boot_failed
-- A machine that did not start or boot goes; its dispatched job waits in the queue again, carrying why the
-- boot failed ($4, the provider's message) as its error until it runs, unless its type was removed from the
-- stored catalogue meanwhile (then it fails with the reason, as queued jobs of a removed type do, rather than
-- wait for a machine nothing will place).
WITH machine AS (
    DELETE FROM pool_machines WHERE id = $1 AND owner = $2 AND owner_term = $3
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
    error = CASE WHEN job.removed THEN 'machine type ' || j.machine_type || ' was removed from the catalogue' ELSE $4 END,
    worker_id = NULL, owner = NULL, owner_term = NULL
FROM job WHERE j.id = job.id
RETURNING j.id, j.state, CASE WHEN job.removed THEN pg_notify('pool_jobs_done', j.id::text) IS NULL END AS notified;

-- name: retire
-- Set an idle (warm) or named machine of this process to stopping; a busy one is never retired here.
UPDATE pool_machines SET state = 'stopping', last_error = $4
WHERE id = $1 AND owner = $2 AND owner_term = $3 AND state = ANY($5::text[])
RETURNING provider_id;

-- name: stopping
-- This process's machines whose stop has not finished (a failed stop is retried on the next pass).
SELECT id, provider_id FROM pool_machines WHERE owner = $1 AND owner_term = $2 AND state = 'stopping';

-- name: forget_machine
-- The machine is stopped: its row goes.
DELETE FROM pool_machines WHERE id = $1 AND owner = $2 AND owner_term = $3 AND state = 'stopping';

-- name: record_misses
UPDATE pool_machines SET health_misses = $2
WHERE id = $1 AND owner = $3 AND owner_term = $4 AND state = 'warm';

-- name: own_machines
-- This process's machines, with where they are and on which backend (for probes and stops; never leaves
-- the service).
SELECT id, tenant_id, machine_type, image, state, session_id, health_misses, cool_down_seconds, job_id,
       provider_id, endpoint, region, backend
FROM pool_machines WHERE owner = $1 AND owner_term = $2;

-- name: starting_machines
-- This process's starting machines, with what a boot needs (the token the worker is started with, the job
-- handed to it and that job's trace headers) and whether a provider start was recorded: the scaler pass
-- boots the ones a placement inserted whose answer was lost (thermostat.policy.pool.unbooted). $1 me, $2 term.
SELECT m.id, m.tenant_id, m.machine_type, m.image, m.state, m.session_id, m.health_misses, m.cool_down_seconds,
       m.token, m.backend, m.provider_id, j.id AS job_id, j.traceparent, j.tracestate
FROM pool_machines m
LEFT JOIN pool_jobs j ON j.id = m.job_id AND j.worker_id = m.id AND j.state = 'dispatched'
WHERE m.owner = $1 AND m.owner_term = $2 AND m.state = 'starting';

-- name: machine_backend
-- Which backend a machine is on, to stop it there (stops are rare: one read each, off the hot path).
SELECT backend FROM pool_machines WHERE id = $1;

-- name: machine_address
-- Where a machine is and its token, to post a cancel to it.
SELECT endpoint, token FROM pool_machines WHERE id = $1;

-- name: cancel
-- Mark the job cancelled at once if it has not finished. A job not yet running drops its owner (it never
-- reaches a machine); a running one keeps it, so the process running it records its usage when the
-- machine answers. Returns the state it was in.
WITH old AS (
    SELECT id, state FROM pool_jobs WHERE id = $1 AND tenant_id = $2 FOR UPDATE
)
UPDATE pool_jobs j
SET state = 'cancelled', completed_at = now(), build_id = $3, result = NULL, error = NULL,
    payload = CASE WHEN old.state = 'running' THEN j.payload ELSE NULL END,
    owner = CASE WHEN old.state = 'running' THEN j.owner END,
    owner_term = CASE WHEN old.state = 'running' THEN j.owner_term END
FROM old
WHERE j.id = old.id AND old.state IN ('queued', 'dispatched', 'running')
RETURNING old.state AS prior, j.worker_id, pg_notify('pool_jobs_done', j.id::text) IS NULL AS notified;

-- name: watch_job
-- A WaitJob begins: the job is marked watched, so a completion from here on notifies every process, and read
-- as it stands after any completion that landed first (the update waits for a completion in flight). Only the
-- first mark writes: the row lock it takes makes a claim's SKIP LOCKED pass the job over, so a job already
-- watched (every later read of a WaitJob stream) is read without one.
WITH marked AS (
    UPDATE pool_jobs SET watched = true
    WHERE id = $1 AND tenant_id = $2 AND NOT watched
    RETURNING id, tenant_id, machine_type, state, submitted_at, priority, session_id, worker_id, timeout_seconds,
              error, started_at, completed_at, result IS NOT NULL AS has_result,
              COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back, true AS marked
)
SELECT * FROM marked
UNION ALL
SELECT id, tenant_id, machine_type, state, submitted_at, priority, session_id, worker_id, timeout_seconds,
       error, started_at, completed_at, result IS NOT NULL AS has_result,
       COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back, false AS marked
FROM pool_jobs WHERE id = $1 AND tenant_id = $2 AND NOT EXISTS (SELECT 1 FROM marked);

-- name: get_job
SELECT id, tenant_id, machine_type, state, submitted_at, priority, session_id, worker_id, timeout_seconds,
       error, started_at, completed_at, result IS NOT NULL AS has_result,
       COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back
FROM pool_jobs WHERE id = $1 AND tenant_id = $2;

-- name: get_job_result
-- The job as callers see it and, once it has one, its result: what a sync wait answers, in one read.
SELECT id, tenant_id, machine_type, state, submitted_at, priority, session_id, worker_id, timeout_seconds,
       error, started_at, completed_at, result IS NOT NULL AS has_result,
       COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back, result
FROM pool_jobs WHERE id = $1 AND tenant_id = $2;

-- name: get_result
SELECT state, error, result FROM pool_jobs WHERE id = $1 AND tenant_id = $2;

-- name: jobs_by_id
SELECT id, state FROM pool_jobs WHERE id = ANY($1::uuid[]);

-- name: list_workers
SELECT id, tenant_id, machine_type, image, backend, state, region, session_id, job_id, created_at, warm_at,
       last_active_at, health_misses
FROM pool_machines WHERE $1::text IS NULL OR tenant_id = $1
ORDER BY created_at, id;

-- name: list_usage
SELECT position, job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds, started_at,
       ended_at
FROM pool_usage WHERE position > $2 AND ($1::text IS NULL OR tenant_id = $1)
ORDER BY position
LIMIT $3;

-- name: machine_counts
SELECT state, count(*) AS machines FROM pool_machines GROUP BY state;

-- name: machine_counts_by_backend
-- /metrics: machines by state and backend (the fleet's rows; small by the fleet cap).
SELECT state, backend, count(*) AS machines FROM pool_machines GROUP BY state, backend;

-- name: live_job_counts
-- /metrics: jobs not yet ended, by state; each branch reads a partial index (pool_jobs_queue, pool_jobs_owned),
-- so the count grows with the live jobs, never with the history.
SELECT 'queued' AS state, count(*) AS jobs FROM pool_jobs WHERE state = 'queued'
UNION ALL
SELECT state, count(*) AS jobs FROM pool_jobs WHERE state IN ('dispatched', 'running') GROUP BY state;

-- name: read_catalogue
SELECT version, types::text AS types FROM pool_catalogue WHERE id = 1;

-- name: catalogue_version
SELECT version FROM pool_catalogue WHERE id = 1;

-- name: replace_catalogue
-- Store the whole catalogue (version + 1), fail the queued jobs of removed types with the reason, and tell
-- every process. A job already handed to a machine (dispatched, a booting one included) is that machine's
-- to finish: the seed's "its machines finish what they are running, then retire once idle". $1 types (json
-- text), $2 the names it keeps.
WITH stored AS (
    INSERT INTO pool_catalogue (id, version, types, updated_at) VALUES (1, 1, $1::jsonb, now())
    ON CONFLICT (id) DO UPDATE SET version = pool_catalogue.version + 1, types = EXCLUDED.types, updated_at = now()
    RETURNING version
), failed AS (
    UPDATE pool_jobs
    SET state = 'failed', completed_at = now(), payload = NULL, owner = NULL, owner_term = NULL,
        error = 'machine type ' || machine_type || ' was removed from the catalogue'
    WHERE state = 'queued' AND NOT (machine_type = ANY($2::text[]))
    RETURNING id
)
SELECT (SELECT version FROM stored) AS version,
       (SELECT count(*) FROM (SELECT pg_notify('pool_jobs_done', id::text) FROM failed) AS n) AS failed,
       pg_notify('pool_catalogue', (SELECT version FROM stored)::text) IS NULL AS notified;

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

-- name: known_machines
-- Every machine row of every dispatcher process, for the orphan sweep (read after the provider's listing).
SELECT id::text AS id, provider_id FROM pool_machines;

-- name: record_orphan_stop
-- An orphan the sweep terminated; a second sweep's stop of the same machine (it was still listed) is one record.
-- The same statement puts the stop on the machine-events feed (event 'orphan-stopped', no tenant: no row knew it).
WITH stop AS (
    INSERT INTO pool_orphan_stops (backend, provider_id, name, machine_id, stopped_by)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (backend, provider_id) DO NOTHING
    RETURNING machine_id, at
)
INSERT INTO pool_machine_events (machine_id, tenant_id, machine_type, event, at)
SELECT machine_id, '', $6, 'orphan-stopped', at FROM stop
ON CONFLICT (machine_id, event) DO NOTHING;
