-- Lease statements. Each is one statement, so one implicit transaction and one now(): the expiry test
-- and the new expiry are read from the same database clock reading. :ttl is in seconds.

-- name: acquire
-- Take the lease when it is free, expired, or already ours. Two racers on a missing row: one inserts,
-- the other falls into DO UPDATE, sees the winner's live row and returns nothing. The term grows only
-- when the lease changes hands; its holder taking it again (a restart under the same id) keeps the term.
-- taken_over: the row named another holder that had not released it (its lease expired: a takeover).
WITH prior AS (SELECT holder FROM leases WHERE name = :name)
INSERT INTO leases AS l (name, holder, term, acquired_at, renewed_at, expires_at)
VALUES (:name, :holder, 1, now(), now(), now() + make_interval(secs => :ttl))
ON CONFLICT (name) DO UPDATE
    SET holder      = excluded.holder,
        term        = CASE WHEN l.holder = excluded.holder THEN l.term ELSE l.term + 1 END,
        acquired_at = CASE WHEN l.holder = excluded.holder THEN l.acquired_at ELSE now() END,
        renewed_at  = now(),
        expires_at  = excluded.expires_at
    WHERE l.holder IS NULL
       OR l.holder = excluded.holder
       OR l.expires_at <= now()
RETURNING l.term, l.expires_at,
          COALESCE((SELECT holder IS NOT NULL AND holder <> :holder FROM prior), false) AS taken_over;

-- name: acquire_new_term
-- As acquire, but the term grows even when the holder already named takes it again: a new incarnation of
-- a holder (a process restarted under its old name) takes the name at once and fences the old one off,
-- whose renewals and term-matched writes then fail.
WITH prior AS (SELECT holder FROM leases WHERE name = :name)
INSERT INTO leases AS l (name, holder, term, acquired_at, renewed_at, expires_at)
VALUES (:name, :holder, 1, now(), now(), now() + make_interval(secs => :ttl))
ON CONFLICT (name) DO UPDATE
    SET holder      = excluded.holder,
        term        = l.term + 1,
        acquired_at = now(),
        renewed_at  = now(),
        expires_at  = excluded.expires_at
    WHERE l.holder IS NULL
       OR l.holder = excluded.holder
       OR l.expires_at <= now()
RETURNING l.term, l.expires_at,
          COALESCE((SELECT holder IS NOT NULL AND holder <> :holder FROM prior), false) AS taken_over;

-- name: renew
-- Extend our own term. Holder AND term must match: a holder whose lease changed hands, even if it came
-- back to the same holder name under a later term, learns here that it lost.
UPDATE leases
   SET renewed_at = now(),
       expires_at = now() + make_interval(secs => :ttl)
 WHERE name = :name AND holder = :holder AND term = :term
RETURNING term, expires_at;

-- name: release
-- Give the lease up, only if it is still ours in this term; the row stays so the term keeps growing.
UPDATE leases
   SET holder = NULL,
       expires_at = now()
 WHERE name = :name AND holder = :holder AND term = :term
RETURNING term;

-- name: holder
-- The current unexpired holder, if any.
SELECT holder, term, acquired_at, expires_at
  FROM leases
 WHERE name = :name AND holder IS NOT NULL AND expires_at > now();
