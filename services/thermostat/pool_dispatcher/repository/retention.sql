-- Retention (docs/pool-retention.md): the oldest candidates of each table, read by an index in its own order, and
-- their deletion by key in bounded batches. thermostat.policy.pool.retention decides how many of the candidates go;
-- each delete re-checks what made a row a candidate, so a row that changed since it was read stays.
-- Each delete is fenced by the retention lease (:lease_name, :lease_holder, :lease_term): it deletes nothing unless
-- that lease is still this holder's, in this term, unexpired by the database clock, and it holds the lease row FOR
-- SHARE until it commits, so a takeover (which locks that row to update it) waits for the batch in flight: two
-- processes never delete at once, whatever their clocks.

-- name: finished_jobs
-- The oldest finished, unowned jobs by their end (the partial index pool_jobs_finished).
SELECT id, completed_at FROM pool_jobs
WHERE state IN ('completed', 'failed', 'timed_out', 'cancelled') AND owner IS NULL
ORDER BY completed_at
LIMIT :limit;

-- name: prune_jobs
-- The jobs named (:keys), with their results, if still finished and unowned.
WITH fence AS (
    SELECT 1 FROM leases
    WHERE name = :lease_name AND holder = :lease_holder AND term = :lease_term AND expires_at > now()
    FOR SHARE
), gone AS (
    DELETE FROM pool_jobs
    WHERE id = ANY(:keys::uuid[]) AND state IN ('completed', 'failed', 'timed_out', 'cancelled') AND owner IS NULL
      AND EXISTS (SELECT 1 FROM fence)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;

-- name: feed_ack
-- How far metering's ledger landed a feed ('usage' or 'machines'); no row: never acknowledged.
SELECT position FROM pool_feed_acks WHERE feed = :feed;

-- name: oldest_usage
-- The oldest usage events by position (the primary key).
SELECT position, recorded_at FROM pool_usage ORDER BY position LIMIT :limit;

-- name: prune_usage
-- The usage events named (:keys, their positions), if the ledger acknowledged them.
WITH fence AS (
    SELECT 1 FROM leases
    WHERE name = :lease_name AND holder = :lease_holder AND term = :lease_term AND expires_at > now()
    FOR SHARE
), gone AS (
    DELETE FROM pool_usage
    WHERE position = ANY(:keys::bigint[])
      AND position <= (SELECT position FROM pool_feed_acks WHERE feed = 'usage')
      AND EXISTS (SELECT 1 FROM fence)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;

-- name: oldest_machine_stops
-- The oldest stops of dead machines by position (the primary key, past the boots of machines still alive: as
-- many as machines run at once).
SELECT position, machine_id, recorded_at FROM pool_machine_events
WHERE event <> 'started'
ORDER BY position
LIMIT :limit;

-- name: prune_machine_events
-- The named dead machines' events (boot and stop, by the (machine_id, event) key), if the ledger acknowledged
-- them and no machine row of that id is alive. :keys are machine ids.
WITH fence AS (
    SELECT 1 FROM leases
    WHERE name = :lease_name AND holder = :lease_holder AND term = :lease_term AND expires_at > now()
    FOR SHARE
), gone AS (
    DELETE FROM pool_machine_events e
    WHERE e.machine_id = ANY(:keys::uuid[])
      AND e.position <= (SELECT position FROM pool_feed_acks WHERE feed = 'machines')
      AND NOT EXISTS (SELECT 1 FROM pool_machines m WHERE m.id = e.machine_id)
      AND EXISTS (SELECT 1 FROM fence)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;
