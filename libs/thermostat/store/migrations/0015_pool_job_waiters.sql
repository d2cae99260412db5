-- Who waits for a pool job in another process, so a completion notifies only when someone there may wait
-- (thermostat.pool_dispatcher: every completion used to NOTIFY every process). `done_channel`: the channel of
-- the process whose sync submit waits for the job (NULL: no sync wait), written by the submit; that process's
-- own completion wakes its waiter directly, another's notifies that channel only. `watched`: a WaitJob began
-- (in any process), set by the watcher's own row update, which also reads the state: a completion that lands
-- after it notifies every process; one that landed before is what the update reads.
ALTER TABLE pool_jobs ADD COLUMN done_channel text, ADD COLUMN watched boolean NOT NULL DEFAULT false;
