-- The pool's catalogue of machine types, one versioned row. Owned by repository/catalogue.py.

-- name: read_catalogue
SELECT version, types::text AS types FROM pool_catalogue WHERE id = 1;

-- name: catalogue_version
SELECT version FROM pool_catalogue WHERE id = 1;

-- name: replace_catalogue
-- Store the whole catalogue (version + 1), fail the queued jobs of removed types, and tell every process; a job handed
-- to a machine is its to finish (the seed: "finish what they are running, then retire once idle"). :types is json.
WITH stored AS (
    INSERT INTO pool_catalogue (id, version, types, updated_at) VALUES (1, 1, :types::jsonb, now())
    ON CONFLICT (id) DO UPDATE SET version = pool_catalogue.version + 1, types = EXCLUDED.types, updated_at = now()
    RETURNING version
), failed AS (
    UPDATE pool_jobs
    SET state = 'failed', completed_at = now(), payload = NULL, owner = NULL, owner_term = NULL,
        error = 'machine type ' || machine_type || ' was removed from the catalogue'
    WHERE state = 'queued' AND NOT (machine_type = ANY(:names::text[]))
    RETURNING id
)
SELECT (SELECT version FROM stored) AS version,
       (SELECT count(*) FROM (SELECT pg_notify('pool_jobs_done', id::text) FROM failed) AS n) AS failed,
       pg_notify('pool_catalogue', (SELECT version FROM stored)::text) IS NULL AS notified;
