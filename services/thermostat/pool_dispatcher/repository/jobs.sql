-- The pool's jobs: submit and its warm claim, the batch submit, completion and the hand-off of a machine's next
-- job, the conditional send, requeue, hand-back, cancel and the reads. Owned by repository/jobs.py. :owner /
-- :owner_term are the process's instance id and the term of its instance lease; every write to an owned row matches
-- both.

-- name: submit
-- Insert the job and claim for it the best warm machine of its tenant, type and image (test_warm_choice.py) unless a
-- queued job is ahead of it (test_queue_order_sql.py); with :send_now the claim is its conditional send (test_fences).
-- Not claimed, it answers what placement weighs: the key's `live` and `idle` machines, `queued` up to :count_queued.
WITH ahead AS (
    SELECT 1 FROM pool_jobs
    WHERE state = 'queued' AND tenant_id = :tenant_id AND machine_type = :machine_type AND priority >= :priority
    LIMIT 1
), machine AS (
    SELECT id FROM pool_machines
    WHERE state = 'warm' AND tenant_id = :tenant_id AND machine_type = :machine_type AND image = :image
      AND yield_to IS NULL
      AND released_at IS NULL  -- released by a deploy: adopted (probed) first
      AND NOT EXISTS (SELECT 1 FROM ahead)
    -- IS TRUE: a machine with no session compares NULL, which DESC would sort before the affine one
    ORDER BY (:session_id::text IS NOT NULL AND session_id = :session_id) IS TRUE DESC, last_active_at DESC NULLS LAST,
             id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE pool_machines m
    SET state = 'busy', job_id = :job_id, session_id = COALESCE(:session_id, m.session_id), last_active_at = now(),
        owner = :owner, owner_term = :owner_term
    FROM machine WHERE m.id = machine.id
    RETURNING m.id, m.endpoint, m.token
)
INSERT INTO pool_jobs AS j (id, tenant_id, machine_type, state, priority, session_id, timeout_seconds, payload,
                            started_at, worker_id, owner, owner_term, traceparent, tracestate, done_channel)
SELECT :job_id, :tenant_id, :machine_type,
       CASE WHEN taken.id IS NULL THEN 'queued' WHEN :send_now THEN 'running' ELSE 'dispatched' END,
       -- the base type: sent as the column's domain (migration 0016), each call would pay the domain's check twice
       :priority, :session_id, :timeout_seconds::double precision, :payload,
       CASE WHEN taken.id IS NOT NULL AND :send_now THEN now() END, taken.id,
       CASE WHEN taken.id IS NULL THEN NULL ELSE :owner END,
       CASE WHEN taken.id IS NULL THEN NULL ELSE :owner_term::bigint END,
       :traceparent, :tracestate, :done_channel
FROM (SELECT 1) AS one LEFT JOIN taken ON true
RETURNING j.id, j.tenant_id, j.machine_type, j.state, j.submitted_at, j.priority, j.session_id, j.worker_id,
          j.timeout_seconds, j.error, j.started_at, j.completed_at, false AS has_result,
          (SELECT endpoint FROM taken) AS endpoint, (SELECT token FROM taken) AS token,
          CASE WHEN j.worker_id IS NULL THEN (  -- counted only for a job that queued
              SELECT count(*) FROM pool_machines
              WHERE tenant_id = :tenant_id AND machine_type = :machine_type
                AND state IN ('starting', 'warm', 'busy')) END AS live,
          CASE WHEN j.worker_id IS NULL THEN (
              SELECT count(*) FROM pool_machines
              WHERE tenant_id = :tenant_id AND machine_type = :machine_type AND state = 'warm') END AS idle,
          CASE WHEN j.worker_id IS NULL THEN (
              SELECT count(*) FROM (
                  SELECT 1 FROM pool_jobs
                  WHERE state = 'queued' AND tenant_id = :tenant_id AND machine_type = :machine_type
                  LIMIT :count_queued) AS ahead_of_it) END AS queued;

-- name: submit_queued
-- Group commit (thermostat.policy.pool.submit_batch): the arrays' jobs queued in array order, never claimed, with
-- `live` / `idle` / `queued` counted as a submit's are, so a machine gone idle meanwhile has placement poked.
WITH batch AS (
    SELECT b.id, b.priority, b.session_id, b.timeout_seconds, b.payload, b.traceparent, b.tracestate,
           b.done_channel, b.arrival
    FROM unnest(:job_ids::uuid[], :priorities::bigint[], :session_ids::text[], :timeouts::double precision[],
                :payloads::bytea[], :traceparents::text[], :tracestates::text[], :done_channels::text[])
         WITH ORDINALITY AS b(id, priority, session_id, timeout_seconds, payload, traceparent, tracestate,
                              done_channel, arrival)
), inserted AS (
    INSERT INTO pool_jobs AS j (id, tenant_id, machine_type, state, priority, session_id, timeout_seconds, payload,
                                traceparent, tracestate, done_channel)
    SELECT id, :tenant_id, :machine_type, 'queued', priority, session_id, timeout_seconds, payload, traceparent,
           tracestate, done_channel
    FROM batch ORDER BY arrival
    RETURNING j.id, j.tenant_id, j.machine_type, j.state, j.submitted_at, j.priority, j.session_id, j.worker_id,
              j.timeout_seconds, j.error, j.started_at, j.completed_at, false AS has_result
)
SELECT inserted.*,
       (SELECT count(*) FROM pool_machines
        WHERE tenant_id = :tenant_id AND machine_type = :machine_type AND state IN ('starting', 'warm', 'busy'))
           AS live,
       (SELECT count(*) FROM pool_machines
        WHERE tenant_id = :tenant_id AND machine_type = :machine_type AND state = 'warm') AS idle,
       (SELECT count(*) FROM (
            SELECT 1 FROM pool_jobs WHERE state = 'queued' AND tenant_id = :tenant_id AND machine_type = :machine_type
            LIMIT :count_queued) AS ahead_of_it) AS queued
FROM inserted;

-- name: complete
-- Finish a job this process ran (a cancel that landed first stands), its usage, and its machine: warm, stopping
-- (retired, or marked to yield its slot: `yielded_to`), or handed the next queued job, sent at once with :send_next.
-- Notifies the job's sync wait unless it is this process's (:channel), with a result up to :notified_result_bytes.
WITH job AS (
    UPDATE pool_jobs
    SET state = CASE WHEN state = 'cancelled' THEN 'cancelled' ELSE :state END,
        result = CASE WHEN state = 'cancelled' THEN NULL ELSE :result::bytea END,
        error = CASE WHEN state = 'cancelled' THEN error ELSE :error END,
        completed_at = COALESCE(completed_at, now()),
        payload = NULL, owner = NULL, owner_term = NULL
    WHERE id = :job_id AND worker_id = :machine_id AND owner = :owner AND owner_term = :owner_term
      AND state IN ('running', 'cancelled')
    RETURNING id, tenant_id, machine_type, worker_id, state, started_at, completed_at, submitted_at, priority,
              session_id, timeout_seconds, error, result IS NOT NULL AS has_result, done_channel, watched,
              COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back
), usage AS (
    INSERT INTO pool_usage (job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds,
                            started_at, ended_at)
    SELECT id, tenant_id, machine_type, worker_id, state,
           :duration_seconds::double precision, started_at, completed_at  -- the base type, as in submit
    FROM job
    ON CONFLICT (job_id) DO NOTHING
    RETURNING position
), yielding AS (  -- the statement's snapshot: a mark landing meanwhile retires the machine after its next job
    SELECT yield_to FROM pool_machines WHERE id = :machine_id AND yield_to IS NOT NULL
), next AS (
    SELECT id FROM pool_jobs
    WHERE state = 'queued' AND tenant_id = :tenant_id AND machine_type = :machine_type AND :take_next AND NOT :retire
      AND EXISTS (SELECT 1 FROM job) AND NOT EXISTS (SELECT 1 FROM yielding)
    ORDER BY priority DESC, queue_seq
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), handed AS (
    UPDATE pool_jobs j
    SET state = CASE WHEN :send_next THEN 'running' ELSE 'dispatched' END,
        started_at = CASE WHEN :send_next THEN now() END,
        worker_id = :machine_id, owner = :owner, owner_term = :owner_term
    FROM next WHERE j.id = next.id
    RETURNING j.id, j.payload, j.timeout_seconds, j.traceparent, j.tracestate, j.session_id, j.submitted_at, j.state
), machine AS (
    UPDATE pool_machines m
    SET state = CASE WHEN :retire OR EXISTS (SELECT 1 FROM yielding) THEN 'stopping'
                     WHEN EXISTS (SELECT 1 FROM handed) THEN 'busy' ELSE 'warm' END,
        job_id = (SELECT id FROM handed),
        session_id = COALESCE((SELECT session_id FROM handed), m.session_id),
        last_active_at = now()
    WHERE m.id = :machine_id AND m.owner = :owner AND m.owner_term = :owner_term AND EXISTS (SELECT 1 FROM job)
    RETURNING m.state, m.provider_id
)
SELECT job.state AS job_state, job.submitted_at AS job_submitted_at, job.priority AS job_priority,
       job.session_id AS job_session_id, job.timeout_seconds AS job_timeout_seconds, job.error AS job_error,
       job.started_at AS job_started_at, job.completed_at AS job_completed_at, job.has_result AS job_has_result,
       job.handed_back AS job_handed_back,
       (SELECT state FROM machine) AS machine_state,
       (SELECT provider_id FROM machine) AS provider_id,
       (SELECT position FROM usage) AS position,
       (SELECT yield_to FROM yielding WHERE EXISTS (SELECT 1 FROM machine)) AS yielded_to,
       handed.id, handed.payload, handed.timeout_seconds, handed.traceparent, handed.tracestate,
       handed.submitted_at, handed.state = 'running' AS sent,
       (SELECT pg_notify(done_channel, id::text || CASE
            WHEN state = 'completed' AND COALESCE(octet_length(:result::bytea), 0) <= :notified_result_bytes
            THEN ' completed ' || COALESCE(encode(:result::bytea, 'base64'), '') ELSE '' END)
        FROM job WHERE done_channel <> :channel::text) AS notified,
       (SELECT pg_notify('pool_jobs_done', id::text) FROM job WHERE watched) AS watchers_notified
FROM (SELECT 1) AS one LEFT JOIN handed ON true LEFT JOIN job ON true;

-- name: take_next
-- Hand the next queued job of its tenant and type to an idle warm machine on the current image (:image); the
-- machine becomes this process's, as a submit's claim makes it.
WITH machine AS (
    SELECT id, tenant_id, machine_type FROM pool_machines
    WHERE id = :machine_id AND state = 'warm' AND image = :image AND yield_to IS NULL
      AND released_at IS NULL  -- released by a deploy: adopted (probed) first
    FOR UPDATE SKIP LOCKED
), next AS (
    SELECT j.id FROM pool_jobs j, machine
    WHERE j.state = 'queued' AND j.tenant_id = machine.tenant_id AND j.machine_type = machine.machine_type
    ORDER BY j.priority DESC, j.queue_seq
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
), handed AS (
    UPDATE pool_jobs j
    SET state = 'dispatched', worker_id = :machine_id, owner = :owner, owner_term = :owner_term
    FROM next WHERE j.id = next.id
    RETURNING j.id, j.payload, j.timeout_seconds, j.traceparent, j.tracestate, j.session_id, j.submitted_at
), busy AS (
    UPDATE pool_machines m
    SET state = 'busy', job_id = handed.id, session_id = COALESCE(handed.session_id, m.session_id),
        last_active_at = now(), owner = :owner, owner_term = :owner_term
    FROM handed WHERE m.id = :machine_id
    RETURNING m.endpoint, m.token
)
SELECT handed.*, busy.endpoint, busy.token FROM handed, busy;

-- name: mark_sent
-- Right before the send: running only if still dispatched to this machine under this owner and term, else (a cancel,
-- a reclaim, a newer incarnation won) the machine is idle again; answers sent again to its own retry (a lost answer).
WITH sent AS (
    UPDATE pool_jobs SET state = 'running', started_at = CASE WHEN state = 'running' THEN started_at ELSE now() END
    WHERE id = :job_id AND worker_id = :machine_id AND owner = :owner AND owner_term = :owner_term
      AND state IN ('dispatched', 'running')
    RETURNING id
), freed AS (
    UPDATE pool_machines SET state = 'warm', job_id = NULL, last_active_at = now()
    WHERE id = :machine_id AND job_id = :job_id AND owner = :owner AND owner_term = :owner_term AND state = 'busy'
      AND NOT EXISTS (SELECT 1 FROM sent)
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM sent) AS sent, EXISTS (SELECT 1 FROM freed) AS freed;

-- name: requeue_unsent
-- The lease is not trusted for the send: the dispatched job (running too when :marked, by the caller's own mark_sent)
-- queues again in its place; its machine is freed with it, or once the job is no longer live on it.
WITH job AS (
    UPDATE pool_jobs SET state = 'queued', worker_id = NULL, owner = NULL, owner_term = NULL, started_at = NULL
    WHERE id = :job_id AND worker_id = :machine_id AND owner = :owner AND owner_term = :owner_term
      AND (state = 'dispatched' OR (:marked AND state = 'running'))
    RETURNING id
), live AS (
    SELECT id FROM pool_jobs
    WHERE id = :job_id AND worker_id = :machine_id AND owner = :owner AND owner_term = :owner_term
      AND state IN ('dispatched', 'running')
), freed AS (
    UPDATE pool_machines SET state = 'warm', job_id = NULL
    WHERE id = :machine_id AND job_id = :job_id AND owner = :owner AND owner_term = :owner_term AND state = 'busy'
      AND (EXISTS (SELECT 1 FROM job) OR NOT EXISTS (SELECT 1 FROM live))
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM job) AS requeued, EXISTS (SELECT 1 FROM freed) AS freed;

-- name: refused_by
-- The machines that refused a job before now and handed it back, with why (thermostat.policy.pool.hand_back).
SELECT handed_back_from::text FROM pool_jobs WHERE id = :job_id;

-- name: hand_back
-- The running job's machine could not be reached before a byte went out (thermostat.policy.pool.hand_back): the machine
-- retires, the job queues again in its place with the refusal appended, no usage; a cancel or a reclaim first wins.
WITH job AS (
    UPDATE pool_jobs
    SET state = 'queued', worker_id = NULL, owner = NULL, owner_term = NULL, started_at = NULL,
        handed_back_from = COALESCE(handed_back_from, '[]'::jsonb)
                           || jsonb_build_array(jsonb_build_object('machine', worker_id::text, 'reason', :reason::text))
    WHERE id = :job_id AND worker_id = :machine_id AND owner = :owner AND owner_term = :owner_term AND state = 'running'
    RETURNING id
), earlier AS (
    SELECT 1 FROM pool_jobs
    WHERE id = :job_id AND worker_id IS DISTINCT FROM :machine_id
      AND handed_back_from @> jsonb_build_array(jsonb_build_object('machine', :machine_id::uuid::text))
), retired AS (
    UPDATE pool_machines SET state = 'stopping', job_id = NULL, last_error = :last_error
    WHERE id = :machine_id AND job_id = :job_id AND owner = :owner AND owner_term = :owner_term AND state = 'busy'
      AND EXISTS (SELECT 1 FROM job)
    RETURNING provider_id
)
SELECT EXISTS (SELECT 1 FROM job) OR EXISTS (SELECT 1 FROM earlier) AS handed_back,
       COALESCE((SELECT provider_id FROM retired), (
           SELECT provider_id FROM pool_machines
           WHERE id = :machine_id AND owner = :owner AND owner_term = :owner_term AND state = 'stopping'
             AND EXISTS (SELECT 1 FROM earlier)
       )) AS provider_id;

-- name: abandon_running
-- A running job on a busy machine of this process that no task drives: it fails with :reason (no usage, as a reclaimed
-- job's) and its machine, in a state nobody knows, is retired.
WITH failed AS (
    UPDATE pool_jobs
    SET state = 'failed', completed_at = now(), payload = NULL, owner = NULL, owner_term = NULL, error = :reason
    WHERE id = :job_id AND worker_id = :machine_id AND owner = :owner AND owner_term = :owner_term AND state = 'running'
    RETURNING id, pg_notify('pool_jobs_done', id::text) IS NULL AS notified
), retired AS (
    UPDATE pool_machines SET state = 'stopping', job_id = NULL, last_error = :reason
    WHERE id = :machine_id AND job_id = :job_id AND owner = :owner AND owner_term = :owner_term AND state = 'busy'
      AND EXISTS (SELECT 1 FROM failed)
    RETURNING provider_id
)
SELECT EXISTS (SELECT 1 FROM failed) AS failed, EXISTS (SELECT 1 FROM retired) AS retired,
       (SELECT provider_id FROM retired) AS provider_id;

-- name: cancel
-- Mark the job cancelled at once if it has not finished. A job not yet running drops its owner (it never
-- reaches a machine); a running one keeps it, so the process running it records its usage when the
-- machine answers. Returns the state it was in.
WITH old AS (
    SELECT id, state FROM pool_jobs WHERE id = :job_id AND tenant_id = :tenant_id FOR UPDATE
)
UPDATE pool_jobs j
SET state = 'cancelled', completed_at = now(), build_id = :build_id, result = NULL, error = NULL,
    payload = CASE WHEN old.state = 'running' THEN j.payload ELSE NULL END,
    owner = CASE WHEN old.state = 'running' THEN j.owner END,
    owner_term = CASE WHEN old.state = 'running' THEN j.owner_term END
FROM old
WHERE j.id = old.id AND old.state IN ('queued', 'dispatched', 'running')
RETURNING old.state AS prior, j.worker_id, pg_notify('pool_jobs_done', j.id::text) IS NULL AS notified;

-- name: watch_job
-- A WaitJob begins: the job is marked watched (a completion from now on notifies every process) and read; only the
-- first mark writes, as its row lock makes a claim's SKIP LOCKED pass the job over.
WITH marked AS (
    UPDATE pool_jobs SET watched = true
    WHERE id = :job_id AND tenant_id = :tenant_id AND NOT watched
    RETURNING id, tenant_id, machine_type, state, submitted_at, priority, session_id, worker_id, timeout_seconds,
              error, started_at, completed_at, result IS NOT NULL AS has_result,
              COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back, true AS marked
)
SELECT * FROM marked
UNION ALL
SELECT id, tenant_id, machine_type, state, submitted_at, priority, session_id, worker_id, timeout_seconds,
       error, started_at, completed_at, result IS NOT NULL AS has_result,
       COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back, false AS marked
FROM pool_jobs WHERE id = :job_id AND tenant_id = :tenant_id AND NOT EXISTS (SELECT 1 FROM marked);

-- name: get_job
SELECT id, tenant_id, machine_type, state, submitted_at, priority, session_id, worker_id, timeout_seconds,
       error, started_at, completed_at, result IS NOT NULL AS has_result,
       COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back
FROM pool_jobs WHERE id = :job_id AND tenant_id = :tenant_id;

-- name: get_job_result
-- The job as callers see it and, once it has one, its result: what a sync wait answers, in one read.
SELECT id, tenant_id, machine_type, state, submitted_at, priority, session_id, worker_id, timeout_seconds,
       error, started_at, completed_at, result IS NOT NULL AS has_result,
       COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back, result
FROM pool_jobs WHERE id = :job_id AND tenant_id = :tenant_id;

-- name: get_jobs
-- Many jobs as callers see them (no result), by id: the sync waits' once-a-second re-reads, gathered into one read
-- (engine/waits.py); each wait checks the tenant itself.
SELECT id, tenant_id, machine_type, state, submitted_at, priority, session_id, worker_id, timeout_seconds,
       error, started_at, completed_at, result IS NOT NULL AS has_result,
       COALESCE(jsonb_array_length(handed_back_from), 0) AS handed_back
FROM pool_jobs WHERE id = ANY(:job_ids::uuid[]);

-- name: get_result
SELECT state, error, result FROM pool_jobs WHERE id = :job_id AND tenant_id = :tenant_id;

-- name: jobs_by_id
SELECT id, state FROM pool_jobs WHERE id = ANY(:job_ids::uuid[]);

-- name: list_usage
SELECT position, job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds, started_at,
       ended_at
FROM pool_usage WHERE position > :after AND (:tenant_id::text IS NULL OR tenant_id = :tenant_id)
ORDER BY position
LIMIT :limit;

-- name: live_job_counts
-- /metrics: jobs not yet ended, by state; each branch reads a partial index (pool_jobs_queue, pool_jobs_owned),
-- so the count grows with the live jobs, never with the history.
SELECT 'queued' AS state, count(*) AS jobs FROM pool_jobs WHERE state = 'queued'
UNION ALL
SELECT state, count(*) AS jobs FROM pool_jobs WHERE state IN ('dispatched', 'running') GROUP BY state;

-- name: in_flight
-- This process's jobs in flight (dispatched or running under its owner and term): a shutdown's drain waits for
-- none before it releases the machines.
SELECT count(*) FROM pool_jobs WHERE owner = :owner AND owner_term = :owner_term AND state IN ('dispatched', 'running');
