-- Waiting on a dependency as its own count. A pending job is waiting while any job it depends
-- on (job_deps) has not succeeded; a dependency that succeeded in any experiment (the job is
-- shared by job_key) is met. `waiting` counts those jobs; `pending` still counts every job in
-- state pending, the waiting ones included, so `pending - waiting` are ready to dispatch.
CREATE OR REPLACE VIEW v_experiment_progress AS
SELECT e.id AS experiment_id,
       e.name AS experiment,
       count(j.id) AS total,
       count(j.id) FILTER (WHERE j.state = 'pending') AS pending,
       count(j.id) FILTER (WHERE j.state = 'running') AS running,
       count(j.id) FILTER (WHERE j.state = 'succeeded') AS succeeded,
       count(j.id) FILTER (WHERE j.state = 'failed') AS failed,
       count(j.id) FILTER (WHERE j.state = 'cancelled') AS cancelled,
       e.created_at,
       count(j.id) FILTER (WHERE j.state = 'pending' AND EXISTS (
           SELECT 1 FROM job_deps jd JOIN jobs d ON d.id = jd.depends_on
           WHERE jd.job = j.id AND d.state <> 'succeeded')) AS waiting
FROM experiments e
LEFT JOIN experiment_jobs ej ON ej.experiment = e.id
LEFT JOIN jobs j ON j.id = ej.job
GROUP BY e.id, e.name, e.created_at;

-- Each pending job that waits on a dependency, with the dependencies not yet succeeded (ids
-- and states, in id order), one row per experiment the job belongs to.
CREATE VIEW v_waiting_jobs AS
SELECT e.name AS experiment,
       j.id AS job_id,
       j.job_key,
       j.kind,
       w.waiting_on,
       w.waiting_states
FROM jobs j
JOIN LATERAL (
    SELECT array_agg(d.id ORDER BY d.id) AS waiting_on,
           array_agg(d.state ORDER BY d.id) AS waiting_states
    FROM job_deps jd JOIN jobs d ON d.id = jd.depends_on
    WHERE jd.job = j.id AND d.state <> 'succeeded') w ON w.waiting_on IS NOT NULL
JOIN experiment_jobs ej ON ej.job = j.id
JOIN experiments e ON e.id = ej.experiment
WHERE j.state = 'pending';
