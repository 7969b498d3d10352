-- attempts.cause: the class of an attempt's end, beside its outcome and its error text
-- (docs/failures.md's outcome tables give the exact cause of each name). NULL while the
-- attempt runs, when it succeeded, and for an attempt ended before this migration whose error
-- text does not say it exactly.
--   lost:      oom (its worker process was ended by the OOM killer, as its supervisor said),
--              signal (by another signal), exit (it exited), lease (no heartbeat for a lease),
--              restart (its worker id registered again without it), grace (not re-attached
--              within the grace after a coordinator restart)
--   failed:    job_error (permanent), worker_error (transient)
--   preempted: preempted (the worker reported it), bye (the worker left without reporting
--              it), undeliverable (its ASSIGN could not be sent), assign_lost (its ASSIGN was
--              lost with the previous coordinator)
--   cancelled: cancelled
ALTER TABLE attempts ADD COLUMN cause text
    CHECK (cause IN ('oom', 'signal', 'exit', 'lease', 'restart', 'grace', 'job_error',
                     'worker_error', 'preempted', 'bye', 'undeliverable', 'assign_lost',
                     'cancelled'));

-- Lost attempts ended before: the class where the coordinator's own words say it exactly
-- (coordinator/server/jobs.c appends a supervisor's words after "; its process ended: ",
-- common/exit_status.c writes them). The worker's messages of failed and preempted attempts
-- are its own text and say nothing certain: those stay NULL.
UPDATE attempts SET cause = CASE
    WHEN error LIKE '%; its process ended: killed by signal 9 (SIGKILL); out of memory%' THEN 'oom'
    WHEN error LIKE '%; its process ended: killed by signal %' THEN 'signal'
    WHEN error LIKE '%; its process ended: exit status %' THEN 'exit'
    WHEN error LIKE 'lease expired: no heartbeat from worker %' THEN 'lease'
    WHEN error LIKE 'lease expired: worker % re-registered from a new connection without this attempt%'
        OR error LIKE 'worker re-registered without it (restarted)%'
        OR error LIKE 'worker re-registered after the coordinator restart without it (its process ended)%'
        THEN 'restart'
    WHEN error LIKE 'worker % did not re-attach within % ms of a coordinator restart%' THEN 'grace'
    END
WHERE outcome = 'lost' AND cause IS NULL;
