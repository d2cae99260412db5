-- Fair share at the fleet cap (issue 23 item 2; thermostat.policy.pool.fair_share): the tenant a busy machine gives
-- its fleet slot to once its current job ends (NULL: none). Set and cleared under placement's lock by whichever
-- process plans it; the machine's own completion reads it and retires the machine instead of handing it the next
-- job, and no claim takes a machine that carries it. Written only while a tenant waits at the fleet cap.
ALTER TABLE pool_machines ADD COLUMN yield_to text;
