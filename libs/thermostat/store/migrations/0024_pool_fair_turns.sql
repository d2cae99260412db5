-- Rotation at the fleet cap (issue 35 item 1; thermostat.policy.pool.rotation): when a tenant's machine is rotated
-- out for a tenant waiting at the fleet cap, its wait for the next slot begins then, not at its oldest queued job,
-- so it queues behind the tenants already waiting. `after_seq` is that moment in the jobs' submission order (the
-- sequence the next submitted job gets, when the rotation was decided), compared with each tenant's first queued job. Written
-- under placement's lock by whichever process decides the rotation; one row per tenant, overwritten.
CREATE TABLE pool_fair_turns (
    tenant_id  text PRIMARY KEY,
    after_seq  bigint NOT NULL
);
