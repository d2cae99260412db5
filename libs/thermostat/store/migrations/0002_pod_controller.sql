-- The pod controller's durable records (#2050, #2541) and the readiness the idle monitor publishes.

-- pod_actions: one row per billable call issued to RunPod (start, create, terminate, stop), accepted or
-- refused. Append-only: every row is something RunPod may charge for, and nothing rewrites history.
CREATE TABLE pod_actions (
    id              uuid PRIMARY KEY,
    pod_name        text NOT NULL,
    action          text NOT NULL CHECK (action IN ('Start', 'Create', 'Terminate', 'Stop')),
    pod_id          text NOT NULL,
    gpu_id          text,
    price_per_hour  double precision,
    http_status     integer,
    ok              boolean NOT NULL,
    trigger         text NOT NULL CHECK (trigger IN ('wake', 'idle', 'boot-grace', 'runtime-cap', 'manual')),
    detail          text,
    at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pod_actions_by_pod ON pod_actions (pod_name, at DESC, id DESC);

CREATE FUNCTION pod_actions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'pod_actions is append-only';
END $$;
CREATE TRIGGER pod_actions_no_rewrite BEFORE UPDATE OR DELETE ON pod_actions
    FOR EACH ROW EXECUTE FUNCTION pod_actions_append_only();

-- pod_wakes: one row per wake (Requested, then Completed). At most one wake per pod is in flight: the
-- partial unique index is what lets a second replica find and join the running one.
CREATE TABLE pod_wakes (
    attempt_id            uuid PRIMARY KEY,
    pod_name              text NOT NULL,
    holder                text NOT NULL,
    requested_at          timestamptz NOT NULL DEFAULT now(),
    completed_at          timestamptz,
    outcome               text CHECK (outcome IN ('Succeeded', 'Refused', 'TimedOut', 'Failed')),
    wake_outcome          text,
    reason                text,
    pod_id                text,
    gpu_id                text,
    price_per_hour        double precision,
    candidates_considered integer,
    last_provider_status  integer,
    result                jsonb
);
CREATE UNIQUE INDEX pod_wakes_one_in_flight ON pod_wakes (pod_name) WHERE completed_at IS NULL;
CREATE INDEX pod_wakes_by_pod ON pod_wakes (pod_name, requested_at DESC);

-- pod_readiness: when the idle monitor first saw vLLM answer since the pod came up (GET readySince).
CREATE TABLE pod_readiness (
    pod_name     text PRIMARY KEY,
    pod_id       text NOT NULL,
    ready_since  timestamptz NOT NULL
);

-- pod_boots: measured wake → ready durations, per pod and GPU type, for the wake ETA.
CREATE TABLE pod_boots (
    pod_name          text NOT NULL,
    pod_id            text NOT NULL,
    gpu_id            text NOT NULL DEFAULT '',
    attempt_id        uuid,
    ready_at          timestamptz NOT NULL,
    duration_seconds  double precision NOT NULL CHECK (duration_seconds >= 0),
    PRIMARY KEY (pod_name, pod_id, ready_at)
);
CREATE INDEX pod_boots_recent ON pod_boots (pod_name, gpu_id, ready_at DESC);
