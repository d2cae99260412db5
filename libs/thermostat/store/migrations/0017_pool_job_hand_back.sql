-- A job handed back (issue 29): a machine that could not be reached before any byte of the job was sent (it died
-- while warm) is retired, and its job goes back to the queue in its old place rather than failing.
-- `handed_back_from`: the machines that refused the job so far and why, in order, as a JSON array of
-- {"machine": <id>, "reason": <the worker client's words>} (NULL: none). It bounds the hand-backs
-- (thermostat.policy.pool.hand_back) and names each attempt in the error of a job no machine took; the job's
-- JSON counts the machines it was handed to from it. Written only on that rare path: nothing on the hot path.
ALTER TABLE pool_jobs ADD COLUMN handed_back_from jsonb;
