-- An orphan the pool's sweep terminated is on the machine-events feed metering reads (issue 12: "recorded as a
-- billable action with trigger orphan"), as event 'orphan-stopped'. Its boot is unknown (no row ever held it, or
-- the row was lost), so it adds no machine time; the ledger holds the stop, who ordered it and when.
ALTER TABLE pool_machine_events DROP CONSTRAINT pool_machine_events_event_check;
ALTER TABLE pool_machine_events ADD CONSTRAINT pool_machine_events_event_check
    CHECK (event IN ('started', 'stopped', 'orphan-stopped'));
