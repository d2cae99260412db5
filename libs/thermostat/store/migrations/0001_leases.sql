-- Leases: named, expiring, fenced ownership — the monitor's ticker per pod, the wake gate per pod, the
-- pool's jobs and machines. Expiry is judged by this database's clock (now()), never a process's.
-- A released lease keeps its row (holder NULL) so that a name's terms only ever grow: a stale holder can
-- never meet its old term again.
CREATE TABLE leases (
    name        text PRIMARY KEY CHECK (name <> ''),
    holder      text CHECK (holder <> ''),
    term        bigint NOT NULL CHECK (term > 0),
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

COMMENT ON COLUMN leases.holder IS 'who holds the lease; NULL once released';
COMMENT ON COLUMN leases.term IS 'grows by one each time the lease changes hands';
COMMENT ON COLUMN leases.acquired_at IS 'when the current term began';
