-- The pool's value rules move from table CHECK constraints to domains: the same rules, checked where a value is
-- written. Postgres re-reads each CHECK of a table from its stored text and plans it again on every statement that
-- writes the table (the pool's hot statements write three such tables, in up to four places): a profile of the
-- backend running them put 8 % of its CPU there. A domain's rule is kept planned in the type cache and checked
-- only for the columns a statement assigns (bench/pool_pg_cost.py: Postgres's CPU per job 0.94x).
-- Each domain is created bare and the columns take it (a relabelling: no table rewrite, though the indexes naming
-- those columns are rebuilt), then the rule is added, which scans the rows once to validate them.
CREATE DOMAIN pool_job_state AS text;
CREATE DOMAIN pool_machine_state AS text;
CREATE DOMAIN pool_terminal_state AS text;
CREATE DOMAIN pool_timeout_seconds AS double precision;
CREATE DOMAIN pool_duration_seconds AS double precision;

ALTER TABLE pool_jobs
    DROP CONSTRAINT pool_jobs_state_check,
    DROP CONSTRAINT pool_jobs_timeout_seconds_check,
    ALTER COLUMN state TYPE pool_job_state,
    ALTER COLUMN timeout_seconds TYPE pool_timeout_seconds;
ALTER TABLE pool_machines
    DROP CONSTRAINT pool_machines_state_check,
    ALTER COLUMN state TYPE pool_machine_state;
ALTER TABLE pool_usage
    DROP CONSTRAINT pool_usage_terminal_state_check,
    DROP CONSTRAINT pool_usage_duration_seconds_check,
    ALTER COLUMN terminal_state TYPE pool_terminal_state,
    ALTER COLUMN duration_seconds TYPE pool_duration_seconds;

ALTER DOMAIN pool_job_state ADD CONSTRAINT pool_job_state_check
    CHECK (VALUE IN ('queued', 'dispatched', 'running', 'completed', 'failed', 'timed_out', 'cancelled'));
ALTER DOMAIN pool_machine_state ADD CONSTRAINT pool_machine_state_check
    CHECK (VALUE IN ('starting', 'warm', 'busy', 'stopping'));
ALTER DOMAIN pool_terminal_state ADD CONSTRAINT pool_terminal_state_check
    CHECK (VALUE IN ('completed', 'failed', 'timed_out', 'cancelled'));
ALTER DOMAIN pool_timeout_seconds ADD CONSTRAINT pool_timeout_seconds_check CHECK (VALUE > 0);
ALTER DOMAIN pool_duration_seconds ADD CONSTRAINT pool_duration_seconds_check CHECK (VALUE >= 0);
