-- The pool's jobs: submit and its warm claim, the batch submit, completion and the hand-off of a machine's next
-- job, the conditional send, requeue, hand-back, cancel and the reads. Owned by repository/jobs.py. :owner /
-- :owner_term are the process's instance id and the term of its instance lease; every write to an owned row matches
-- both.

-- name: submit
-- Insert the job and, in the same statement, hand it to the best warm machine of the tenant, type and
-- current image (session affinity first, then most recently active, then the id: the one rule for which warm
-- machine takes a job, tests/integration/pool_dispatcher/test_warm_choice.py; `IS TRUE`: a machine with no
-- session compares NULL, which DESC would sort before the affine one) unless a queued job of that tenant and
-- type with at least this priority is ahead of it. Claimed, the job is this process's on that machine and
-- goes out right after the answer. :send_now (the lease was trusted for the call before the statement): this
-- statement is the job's conditional send, `running` from here with no mark_sent. About as safe (the window
-- between statement and send is one answer long, as between mark_sent and its send or a hand-off): the id is new
-- with this statement, so no cancel can name the job before it answers, and a lapsing lease is caught by the trust
-- check before the statement, as for a completion's hand-off. Without :send_now it is `dispatched`, and
-- mark_sent's own check decides (it requeues). Not claimed: queued, and `live` / `idle` (the tenant's machines of
-- the type: starting, warm or busy / warm) say whether placement could act on it
-- (thermostat.policy.pool.placement). :done_channel: the channel of this process's sync wait for the job (NULL: no
-- sync wait), which a completion in another process notifies. :timeout_seconds is cast to its base type: left to
-- take the column's domain (migration 0016), it would be received through the domain's own check on every call,
-- besides the check the write makes. `queued`: the tenant's queued jobs of the type ahead of a job that queued,
-- counted up to :count_queued (thermostat.policy.pool.submit_batch: whether the next submit may wait for a batch).
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
-- Group commit (thermostat.policy.pool.submit_batch): queue several jobs of one tenant and type at once, one
-- row per element of the arrays, taking queue places in array order (the order the submits arrived in
-- this process). No claim: a batch is written only for a key whose last submit here queued with placement
-- unable to act; `live` / `idle` / `queued` (up to :count_queued) are counted as the submit's are, so the service
-- pokes placement when a machine went idle meanwhile (a completion that committed before this statement, which it
-- sees as warm).
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
-- Finish a job this process ran: its terminal state (a cancel that landed first stands, and drops the
-- result), the usage event in the same statement, and the machine back to warm, to stopping when retired,
-- or straight on to the next queued job of its tenant and type (priority desc, then FIFO) when it is kept and
-- its image is current. A machine marked to give its slot to a tenant waiting at the fleet cap (`yield_to`,
-- thermostat.policy.pool.fair_share) is retired instead of taking the next job (`yielded_to` names that tenant).
-- :send_next: the next job is sent at once, so this statement is its conditional send (running, as mark_sent would
-- make it: the claim is fenced by owner and term like mark_sent, and the payload goes out
-- right after the answer); false: dispatched, sent after mark_sent (the lease was not trusted for the call).
-- Notified only where someone may wait in another process (this process wakes its own waiters): the channel of
-- the sync wait another process's submit recorded, with the job's id, and for a completed job whose result is
-- at most :notified_result_bytes bytes the result too ("<id> completed <base64>"), so that wait answers without
-- reading the job back; and every process's `pool_jobs_done` with the id when a WaitJob watches the job. :channel is
-- this process's own. :duration_seconds (monotonic) is cast to its base type, as the submit's :timeout_seconds is.
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
    SELECT id, tenant_id, machine_type, worker_id, state, :duration_seconds::double precision, started_at,
           completed_at
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
-- Right before the payload goes to the machine: the job is running only if it is still dispatched to this
-- machine under this process's owner and term. A cancel (or a reclaim, or a newer incarnation of this
-- instance) that landed since the claim wins: nothing is sent, nothing metered, and the machine is idle
-- again in the same statement. Idempotent per owner: a job already running on this machine under this owner
-- and term was marked by this caller's earlier attempt whose answer was lost (only the step driving the
-- machine marks it, and it sends only after the answer), so it answers sent again, keeping its start.
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
-- This process may not send (its instance lease is not trusted for the call): the dispatched job goes back
-- to the queue in its old place, and the machine is idle. :marked: the caller's own mark_sent landed (running)
-- but nothing was sent, so a running job is requeued too.
-- The machine is freed only with its job: when the job was requeued, or is no longer live on it under this
-- owner and term (a cancel won, as in mark_sent). A job still live on it that this call may not requeue
-- (running, unmarked: a reconcile that no longer knows the claim went unanswered) keeps its machine busy, so
-- no other job is handed a machine that one is said to run on.
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
-- The running job's machine could not be reached before any byte was sent (thermostat.policy.pool.hand_back):
-- the machine is retired at once (stopping, as a failed probe streak retires one) and the job goes back to the
-- queue in its old place (its priority and queue_seq are untouched), this refusal appended to handed_back_from,
-- with no usage event (it ran for no time). A cancel that landed first (cancelled, still owned: it was running)
-- or a reclaim wins: nothing changes here and the caller records the end as a completion would. Written again
-- after a lost answer, it answers handed back once more: the job names this machine among its refusals and is
-- no longer on it. :reason is the refusal's, :last_error the machine's.
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
-- A running job on a busy machine of this process that no task here drives (its sender ended on an unexpected
-- error, or a reconcile no longer knows its claim went unanswered, so requeue_unsent kept it): nobody will report
-- it, so it fails with the reason (no usage: it never reported, as a reclaimed job's) and its machine, whose state
-- is unknown, is retired.
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
-- A WaitJob begins: the job is marked watched, so a completion from here on notifies every process, and read
-- as it stands after any completion that landed first (the update waits for a completion in flight). Only the
-- first mark writes: the row lock it takes makes a claim's SKIP LOCKED pass the job over, so a job already
-- watched (every later read of a WaitJob stream) is read without one.
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
