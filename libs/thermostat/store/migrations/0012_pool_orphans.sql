-- Orphan sweep (issue 12): every provider machine the pool's sweep terminated because it carried the pool's
-- name and no pool_machines row knew it. It has no row, so this is its only record: who, where, and when it
-- was ended, with trigger 'orphan' (the same word the pod controller's actions use).
CREATE TABLE pool_orphan_stops (
    position     bigserial PRIMARY KEY,
    backend      text NOT NULL,
    provider_id  text NOT NULL,
    name         text NOT NULL,
    machine_id   uuid NOT NULL,
    trigger      text NOT NULL DEFAULT 'orphan' CHECK (trigger = 'orphan'),
    stopped_by   text NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (backend, provider_id)
);
