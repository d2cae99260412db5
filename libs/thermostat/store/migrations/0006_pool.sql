-- The pool dispatcher (issue 10): the catalogue, jobs, machines and the usage feed, shared by every
-- dispatcher process. A row a process acts on (a job dispatched or running; a machine starting, warm, busy
-- or stopping) names its owner (instance id) and owner_term (the term of the owner's `pool-instance:<id>`
-- lease): every write checks both, and another process takes the rows over once that lease has lapsed by
-- the database clock.

-- pool_catalogue: the catalogue stored by an admin PUT (one row); version grows by one per replace, so
-- every process can tell its cached copy is old.
CREATE TABLE pool_catalogue (
    id          int PRIMARY KEY CHECK (id = 1),
    version     bigint NOT NULL,
    types       jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pool_jobs (
    id               uuid PRIMARY KEY,
    queue_seq        bigserial NOT NULL,
    tenant_id        text NOT NULL,
    machine_type     text NOT NULL,
    state            text NOT NULL CHECK (state IN ('queued', 'dispatched', 'running', 'completed', 'failed',
                                                    'timed_out', 'cancelled')),
    priority         bigint NOT NULL DEFAULT 0,
    session_id       text,
    timeout_seconds  double precision NOT NULL CHECK (timeout_seconds > 0),
    payload          bytea,
    result           bytea,
    error            text,
    submitted_at     timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    completed_at     timestamptz,
    worker_id        uuid,
    owner            text,
    owner_term       bigint,
    traceparent      text,
    tracestate       text,
    build_id         text
);
-- the queue in line order per tenant and type (priority desc, then FIFO)
CREATE INDEX pool_jobs_queue ON pool_jobs (tenant_id, machine_type, priority DESC, queue_seq)
    WHERE state = 'queued';
CREATE INDEX pool_jobs_owned ON pool_jobs (owner) WHERE state IN ('dispatched', 'running');

CREATE TABLE pool_machines (
    id                 uuid PRIMARY KEY,
    tenant_id          text NOT NULL,
    machine_type       text NOT NULL,
    image              text NOT NULL,
    backend            text NOT NULL,
    provider_id        text,
    endpoint           text,
    token              text NOT NULL,
    state              text NOT NULL CHECK (state IN ('starting', 'warm', 'busy', 'stopping')),
    region             text,
    session_id         text,
    job_id             uuid,
    owner              text NOT NULL,
    owner_term         bigint NOT NULL,
    cool_down_seconds  double precision NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    warm_at            timestamptz,
    last_active_at     timestamptz,
    health_misses      int NOT NULL DEFAULT 0,
    last_error         text
);
CREATE INDEX pool_machines_warm ON pool_machines (tenant_id, machine_type, image) WHERE state = 'warm';
CREATE INDEX pool_machines_owner ON pool_machines (owner);

-- pool_usage: one event per terminal job that reached a machine, written in the transaction that made the
-- job terminal. `position` is the resumable feed position the metering service reads from.
CREATE TABLE pool_usage (
    position          bigserial PRIMARY KEY,
    job_id            uuid NOT NULL UNIQUE,
    tenant_id         text NOT NULL,
    machine_type      text NOT NULL,
    worker_id         uuid NOT NULL,
    terminal_state    text NOT NULL CHECK (terminal_state IN ('completed', 'failed', 'timed_out', 'cancelled')),
    duration_seconds  double precision NOT NULL CHECK (duration_seconds >= 0),
    started_at        timestamptz NOT NULL,
    ended_at          timestamptz NOT NULL
);
CREATE INDEX pool_usage_by_tenant ON pool_usage (tenant_id, position);
