-- Metering, part 2 (issue 12): machine lives for pool spend. A machine bills from its boot to its stop,
-- warm and idle included, and its row is deleted once the provider stopped it; so each row's insert and delete
-- is recorded as an event by a trigger (the dispatcher's statements stay as they are), read by metering
-- through PoolDispatcherInternal.ListMachineEvents.

CREATE TABLE pool_machine_events (
    position      bigserial PRIMARY KEY,
    machine_id    uuid NOT NULL,
    tenant_id     text NOT NULL,
    machine_type  text NOT NULL,
    event         text NOT NULL CHECK (event IN ('started', 'stopped')),
    at            timestamptz NOT NULL,
    -- when the event was inserted: the feed's settle window is measured on it (policy/pool/usage_feed.py)
    recorded_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (machine_id, event)
);

CREATE FUNCTION pool_machine_life() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pool_machine_events (machine_id, tenant_id, machine_type, event, at)
        VALUES (NEW.id, NEW.tenant_id, NEW.machine_type, 'started', NEW.created_at)
        ON CONFLICT (machine_id, event) DO NOTHING;
        RETURN NEW;
    END IF;
    INSERT INTO pool_machine_events (machine_id, tenant_id, machine_type, event, at)
    VALUES (OLD.id, OLD.tenant_id, OLD.machine_type, 'stopped', clock_timestamp())
    ON CONFLICT (machine_id, event) DO NOTHING;
    RETURN OLD;
END $$;

CREATE TRIGGER pool_machines_life AFTER INSERT OR DELETE ON pool_machines
    FOR EACH ROW EXECUTE FUNCTION pool_machine_life();

-- machines alive when this migration runs: their boot is on record too
INSERT INTO pool_machine_events (machine_id, tenant_id, machine_type, event, at)
SELECT id, tenant_id, machine_type, 'started', created_at FROM pool_machines ORDER BY created_at;

-- ledger_pool_machines: every machine event metering has read, exactly once (machine id and event are the key),
-- with the machine type's price as the pool reported it with the event.
CREATE TABLE ledger_pool_machines (
    source          text NOT NULL,
    source_id       text NOT NULL,   -- '<machine id>/<event>'
    position        bigint NOT NULL,
    machine_id      text NOT NULL,
    tenant_id       text NOT NULL,
    machine_type    text NOT NULL,
    event           text NOT NULL,
    at              timestamptz NOT NULL,
    price_per_hour  double precision,
    ingested_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, source_id)
);
CREATE INDEX ledger_pool_machines_by_tenant ON ledger_pool_machines (tenant_id, machine_id);
CREATE INDEX ledger_pool_usage_by_worker ON ledger_pool_usage (worker_id);
