-- name: feed_position
-- The position a feed was read up to; 0 before its first page.
SELECT COALESCE((SELECT position FROM ledger_feeds WHERE source = :source), 0);

-- name: ensure_feed
INSERT INTO ledger_feeds (source) VALUES (:source) ON CONFLICT (source) DO NOTHING;

-- name: lock_feed
-- Serializes the landing of pages of one feed (two replicas in a lease hand-over land one after the other).
SELECT position FROM ledger_feeds WHERE source = :source FOR UPDATE;

-- name: land_pod_action
-- Idempotent by (source, source_id): a replayed page, or a page a lapsed leader lands too, adds nothing.
INSERT INTO ledger_pod_actions (source, source_id, position, pod_name, action, pod_id, gpu_id, price_per_hour,
                                http_status, ok, trigger, at)
SELECT :source, t.source_id, t.position, t.pod_name, t.action, t.pod_id, t.gpu_id, t.price_per_hour, t.http_status,
       t.ok, t.trigger, t.at
FROM unnest(:source_ids::text[], :positions::bigint[], :pod_names::text[], :actions::text[], :pod_ids::text[],
            :gpu_ids::text[], :prices_per_hour::float8[], :http_statuses::int[], :oks::bool[], :triggers::text[],
            :ats::timestamptz[])
     AS t(source_id, position, pod_name, action, pod_id, gpu_id, price_per_hour, http_status, ok, trigger, at)
ON CONFLICT (source, source_id) DO NOTHING;

-- name: land_pool_usage
-- Idempotent by (source, job id), like the pod actions.
INSERT INTO ledger_pool_usage (source, source_id, position, tenant_id, machine_type, worker_id, terminal_state,
                               duration_seconds, started_at, ended_at)
SELECT :source, t.source_id, t.position, t.tenant_id, t.machine_type, t.worker_id, t.terminal_state,
       t.duration_seconds, t.started_at, t.ended_at
FROM unnest(:source_ids::text[], :positions::bigint[], :tenant_ids::text[], :machine_types::text[],
            :worker_ids::text[], :terminal_states::text[], :durations_seconds::float8[], :started_ats::timestamptz[],
            :ended_ats::timestamptz[])
     AS t(source_id, position, tenant_id, machine_type, worker_id, terminal_state, duration_seconds, started_at,
          ended_at)
ON CONFLICT (source, source_id) DO NOTHING;

-- name: advance_feed
-- In the landing transaction: the position never goes back (a stale replica's older page moves nothing).
UPDATE ledger_feeds SET position = GREATEST(position, :through), head_position = GREATEST(:head, :through),
    last_read_at = now(), error = ''
WHERE source = :source;

-- name: feed_error
-- last_read_at stays the last successful read: the lag in seconds grows while a feed cannot be read.
UPDATE ledger_feeds SET error = :error WHERE source = :source;

-- name: feeds
-- lag_seconds: since the last successful read, by the database clock (NULL: never read).
SELECT source, position, head_position, last_read_at, error,
    EXTRACT(EPOCH FROM now() - last_read_at)::float8 AS lag_seconds
FROM ledger_feeds ORDER BY source;

-- name: pod_events
-- A pod name's billable actions from the ledger, in feed order (spend is folded from them).
SELECT position, at, action, pod_id, ok, http_status, gpu_id, price_per_hour FROM ledger_pod_actions
WHERE lower(pod_name) = lower(:pod_name) ORDER BY position;

-- name: pod_check
-- A budget check in one statement: the pod's ceilings (NULLs: none) and its billable actions landed after
-- position :after, in feed order (none: one row of NULL actions). Indexed by (lower(pod_name), position).
SELECT b.daily_usd, b.monthly_usd, e.position, e.at, e.action, e.pod_id, e.ok, e.http_status, e.gpu_id,
       e.price_per_hour
FROM (SELECT 1) AS one
LEFT JOIN pod_budgets b ON b.pod_name = lower(:pod_name)
LEFT JOIN LATERAL (
    SELECT position, at, action, pod_id, ok, http_status, gpu_id, price_per_hour FROM ledger_pod_actions
    WHERE lower(pod_name) = lower(:pod_name) AND position > :after ORDER BY position
) e ON true
ORDER BY e.position;

-- name: pod_budget
SELECT daily_usd, monthly_usd FROM pod_budgets WHERE pod_name = lower(:pod_name);

-- name: set_pod_budget
INSERT INTO pod_budgets (pod_name, daily_usd, monthly_usd, updated_at)
VALUES (lower(:pod_name), :daily_usd, :monthly_usd, now())
ON CONFLICT (pod_name) DO UPDATE SET daily_usd = excluded.daily_usd, monthly_usd = excluded.monthly_usd,
    updated_at = now();

-- name: db_now
SELECT now();

-- name: land_pool_machine
-- Idempotent by (source, '<machine id>/<event>').
INSERT INTO ledger_pool_machines (source, source_id, position, machine_id, tenant_id, machine_type, event, at,
                                  price_per_hour)
SELECT :source, t.machine_id || '/' || t.event, t.position, t.machine_id, t.tenant_id, t.machine_type, t.event, t.at,
       t.price_per_hour
FROM unnest(:positions::bigint[], :machine_ids::text[], :tenant_ids::text[], :machine_types::text[], :events::text[],
            :ats::timestamptz[], :prices_per_hour::float8[])
     AS t(position, machine_id, tenant_id, machine_type, event, at, price_per_hour)
ON CONFLICT (source, source_id) DO NOTHING;

-- name: pool_lives
-- Machine lives from the ledger, of one tenant (:tenant) or all (NULL), overlapping [:since, :until): boot, stop
-- (NULL: running) and the price recorded with the boot.
SELECT s.machine_id, s.tenant_id, s.machine_type, s.at AS started_at, e.at AS stopped_at, s.price_per_hour
FROM ledger_pool_machines s
LEFT JOIN ledger_pool_machines e ON e.machine_id = s.machine_id AND e.event = 'stopped'
WHERE s.event = 'started' AND (:tenant::text IS NULL OR s.tenant_id = :tenant) AND s.at < :until
  AND (e.at IS NULL OR e.at > :since);

-- name: pool_jobs
-- Job time from the ledger, of one tenant (:tenant) or all (NULL), ended in [:since, :until), at its machine's boot
-- price.
SELECT u.tenant_id, u.machine_type, u.duration_seconds, u.ended_at, m.price_per_hour
FROM ledger_pool_usage u
LEFT JOIN ledger_pool_machines m ON m.machine_id = u.worker_id AND m.event = 'started'
WHERE (:tenant::text IS NULL OR u.tenant_id = :tenant) AND u.ended_at >= :since AND u.ended_at < :until;

-- name: tenant_budget
SELECT daily_usd, monthly_usd FROM tenant_budgets WHERE tenant_id = :tenant;

-- name: tenant_budgets
-- /metrics: the tenants with a ceiling, at most :limit of them.
SELECT tenant_id, daily_usd, monthly_usd FROM tenant_budgets
WHERE daily_usd IS NOT NULL OR monthly_usd IS NOT NULL ORDER BY tenant_id LIMIT :limit;

-- name: set_tenant_budget
INSERT INTO tenant_budgets (tenant_id, daily_usd, monthly_usd, updated_at)
VALUES (:tenant, :daily_usd, :monthly_usd, now())
ON CONFLICT (tenant_id) DO UPDATE SET daily_usd = excluded.daily_usd, monthly_usd = excluded.monthly_usd,
    updated_at = now();
