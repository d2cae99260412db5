-- Metering, part 2 (issue 12): the pool's usage events become metering's second feed.

-- recorded_at: when the usage row was inserted (the database clock, inside its transaction), so the feed
-- can tell a gap a transaction in flight may still fill from a permanent one (policy/pool/usage_feed.py).
-- The usage insert does not name the column: the pool's hot path is unchanged.
ALTER TABLE pool_usage ADD COLUMN recorded_at timestamptz NOT NULL DEFAULT clock_timestamp();

-- ledger_pool_usage: every pool usage event metering has read, exactly once (its job id is the key).
CREATE TABLE ledger_pool_usage (
    source            text NOT NULL,
    source_id         text NOT NULL,   -- the job id
    position          bigint NOT NULL,
    tenant_id         text NOT NULL,
    machine_type      text NOT NULL,
    worker_id         text NOT NULL,
    terminal_state    text NOT NULL,
    duration_seconds  double precision NOT NULL,
    started_at        timestamptz NOT NULL,
    ended_at          timestamptz NOT NULL,
    ingested_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, source_id)
);
CREATE INDEX ledger_pool_usage_by_tenant ON ledger_pool_usage (tenant_id, ended_at);
