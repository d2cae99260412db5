-- Retention (issue 23): finished jobs, usage events and dead machines' events are deleted once kept
-- POOL_JOB_RETENTION_HOURS (docs/pool-retention.md; thermostat.policy.pool.retention decides what goes).

-- pool_jobs_finished: the prune scan's order, the oldest end first. Only rows that are finished and unowned (a job
-- cancelled while running keeps its owner until its machine answers and its usage is recorded), so no queued or
-- live job is ever in it. One more index entry per completion, at the index's right edge (completed_at grows).
CREATE INDEX pool_jobs_finished ON pool_jobs (completed_at)
    WHERE state IN ('completed', 'failed', 'timed_out', 'cancelled') AND owner IS NULL;

-- pool_feed_acks: how far metering's ledger has landed each of the pool's feeds ('usage', 'machines'), as its
-- reader says in each page request (ListUsageEventsRequest.acknowledged_position). It never goes back. A feed's
-- rows at or before it are the ledger's; the pruner deletes them once their retention has passed too.
CREATE TABLE pool_feed_acks (
    feed             text PRIMARY KEY CHECK (feed IN ('usage', 'machines')),
    position         bigint NOT NULL CHECK (position >= 0),
    acknowledged_at  timestamptz NOT NULL DEFAULT now()
);
