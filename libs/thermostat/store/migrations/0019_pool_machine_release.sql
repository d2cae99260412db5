-- Issue 23 item 1: a deploy keeps the fleet. A dispatcher stopped by SIGTERM releases its warm machines instead
-- of stopping them (`released_at`), and the next process under any instance id adopts them after a health probe.
-- The idle clock moves from process memory to the row (`idle_since`), so an adopted or recovered machine keeps
-- what is left of its cool-down instead of getting a fresh full one.
ALTER TABLE pool_machines ADD COLUMN idle_since timestamptz;
ALTER TABLE pool_machines ADD COLUMN released_at timestamptz;
CREATE INDEX pool_machines_released ON pool_machines (released_at) WHERE released_at IS NOT NULL;

-- idle_since is kept by the database on every way into and out of `warm` (a boot's ready, a completion, a send
-- that did not happen, a requeue): one rule in one place rather than in each of those statements. A machine that
-- stays warm (a release, an adoption, a miss count) keeps its clock.
CREATE FUNCTION pool_machines_idle_since() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state <> 'warm' THEN
        NEW.idle_since := NULL;
    ELSIF TG_OP = 'INSERT' OR OLD.state <> 'warm' OR NEW.idle_since IS NULL THEN
        NEW.idle_since := now();
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER pool_machines_idle_since BEFORE INSERT OR UPDATE OF state ON pool_machines
    FOR EACH ROW EXECUTE FUNCTION pool_machines_idle_since();

UPDATE pool_machines SET idle_since = COALESCE(last_active_at, warm_at, now()) WHERE state = 'warm';
