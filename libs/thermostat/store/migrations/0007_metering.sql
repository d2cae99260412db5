-- Metering (issue 12): the pod controller's billable actions become a feed with a position, and metering's
-- ledger, feed positions and pod budgets.

-- position: the feed order. Assigned at insert under the feed lock (queries.sql insert_action), held to
-- commit, so positions become visible in increasing order and a reader that stored p has seen everything
-- at or before p. Existing rows are numbered in the order they were recorded.
ALTER TABLE pod_actions ADD COLUMN position bigint;
CREATE SEQUENCE pod_actions_position;
-- numbering existing rows is the one rewrite the append-only table ever gets
ALTER TABLE pod_actions DISABLE TRIGGER pod_actions_no_rewrite;
UPDATE pod_actions SET position = numbered.n FROM (
    SELECT id, row_number() OVER (ORDER BY at, id) AS n FROM pod_actions
) numbered WHERE numbered.id = pod_actions.id;
SELECT setval('pod_actions_position', COALESCE((SELECT max(position) FROM pod_actions), 0) + 1, false);
ALTER TABLE pod_actions ALTER COLUMN position SET DEFAULT nextval('pod_actions_position');
ALTER TABLE pod_actions ALTER COLUMN position SET NOT NULL;
ALTER TABLE pod_actions ENABLE TRIGGER pod_actions_no_rewrite;
CREATE UNIQUE INDEX pod_actions_by_position ON pod_actions (position);

ALTER TABLE pod_actions DROP CONSTRAINT pod_actions_trigger_check;
ALTER TABLE pod_actions ADD CONSTRAINT pod_actions_trigger_check
    CHECK (trigger IN ('wake', 'idle', 'boot-grace', 'runtime-cap', 'manual', 'budget'));
ALTER TABLE pod_stops DROP CONSTRAINT pod_stops_trigger_check;
ALTER TABLE pod_stops ADD CONSTRAINT pod_stops_trigger_check
    CHECK (trigger IN ('idle', 'boot-grace', 'runtime-cap', 'manual', 'budget'));

-- ledger_pod_actions: every billable action metering has read, exactly once (its source id is the key).
CREATE TABLE ledger_pod_actions (
    source          text NOT NULL,
    source_id       text NOT NULL,
    position        bigint NOT NULL,
    pod_name        text NOT NULL,
    action          text NOT NULL,
    pod_id          text NOT NULL,
    gpu_id          text,
    price_per_hour  double precision,
    http_status     integer,
    ok              boolean NOT NULL,
    trigger         text NOT NULL,
    at              timestamptz NOT NULL,
    ingested_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, source_id)
);
CREATE INDEX ledger_pod_actions_by_pod ON ledger_pod_actions (lower(pod_name), at, position);

-- ledger_feeds: one row per feed, the position read up to (written in the transaction that lands the
-- entries), the head the feed last reported and the last read's outcome.
CREATE TABLE ledger_feeds (
    source         text PRIMARY KEY,
    position       bigint NOT NULL DEFAULT 0,
    head_position  bigint NOT NULL DEFAULT 0,
    last_read_at   timestamptz,
    error          text NOT NULL DEFAULT ''
);

-- pod_budgets: per model pod, USD per UTC day and month; NULL is no ceiling.
CREATE TABLE pod_budgets (
    pod_name     text PRIMARY KEY,  -- lower-cased
    daily_usd    double precision CHECK (daily_usd >= 0),
    monthly_usd  double precision CHECK (monthly_usd >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
