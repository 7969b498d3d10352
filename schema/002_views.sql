-- Views for the questions researchers ask most. Job spec fields come from the spec JSON that
-- `qsweep submit` writes (keys: kind, model.path, model.digest, dataset.path, dataset.digest,
-- dataset.ctx, dataset.max_chunks, format, quantize, mode, part, numerics_version).

-- How far along is each experiment: job counts by state.
CREATE VIEW v_experiment_progress AS
SELECT e.id AS experiment_id,
       e.name AS experiment,
       count(j.id) AS total,
       count(j.id) FILTER (WHERE j.state = 'pending') AS pending,
       count(j.id) FILTER (WHERE j.state = 'running') AS running,
       count(j.id) FILTER (WHERE j.state = 'succeeded') AS succeeded,
       count(j.id) FILTER (WHERE j.state = 'failed') AS failed,
       count(j.id) FILTER (WHERE j.state = 'cancelled') AS cancelled,
       e.created_at
FROM experiments e
LEFT JOIN experiment_jobs ej ON ej.experiment = e.id
LEFT JOIN jobs j ON j.id = ej.job
GROUP BY e.id, e.name, e.created_at;

-- Every stored metric with the spec fields that say what was measured; one row per
-- (experiment, job, metric, step), ready to pivot. A job shared by two experiments appears
-- under each.
CREATE VIEW v_job_results AS
SELECT e.name AS experiment,
       j.id AS job_id,
       j.job_key,
       j.kind,
       j.spec -> 'model' ->> 'path' AS model,
       j.spec -> 'model' ->> 'digest' AS model_digest,
       j.spec -> 'dataset' ->> 'path' AS dataset,
       j.spec -> 'dataset' ->> 'digest' AS dataset_digest,
       j.spec ->> 'format' AS format,
       j.spec ->> 'quantize' AS quantize,
       j.spec ->> 'mode' AS mode,
       j.spec ->> 'part' AS part,
       r.name AS metric,
       r.value,
       r.step,
       r.final,
       r.attempt,
       r.created_at
FROM results r
JOIN jobs j ON j.id = r.job
JOIN experiment_jobs ej ON ej.job = j.id
JOIN experiments e ON e.id = ej.experiment;

-- Jobs that failed for good, with the error they kept and the outcome of their last attempt.
CREATE VIEW v_failed_jobs AS
SELECT j.id AS job_id,
       j.job_key,
       j.kind,
       (SELECT string_agg(e.name, ',' ORDER BY e.name)
        FROM experiment_jobs ej JOIN experiments e ON e.id = ej.experiment
        WHERE ej.job = j.id) AS experiments,
       j.attempts_used,
       j.max_attempts,
       j.last_error,
       la.attempt AS last_attempt,
       la.worker AS last_worker,
       la.outcome AS last_outcome,
       la.error AS last_attempt_error,
       j.updated_at
FROM jobs j
LEFT JOIN LATERAL (SELECT a.attempt, a.worker, a.outcome, a.error
                   FROM attempts a WHERE a.job = j.id
                   ORDER BY a.attempt DESC LIMIT 1) la ON true
WHERE j.state = 'failed';

-- Sensitivity sweeps (arXiv 2603.08747): each final metric of a quantized eval job next to
-- the same metric of the BF16 baseline job for the same model and dataset (same digests,
-- ctx and max_chunks; the baseline with the same numerics_version when there is one).
-- baseline_value is NULL until the baseline has a result. delta = value - baseline_value.
-- KL and top-1 metrics are already measured against BF16; their baseline row, if any, is
-- shown as stored.
CREATE VIEW v_sensitivity AS
SELECT e.name AS experiment,
       j.id AS job_id,
       j.spec -> 'model' ->> 'path' AS model,
       j.spec -> 'model' ->> 'digest' AS model_digest,
       j.spec -> 'dataset' ->> 'path' AS dataset,
       j.spec ->> 'format' AS format,
       j.spec ->> 'quantize' AS quantize,
       j.spec ->> 'mode' AS mode,
       j.spec ->> 'part' AS part,
       r.name AS metric,
       r.value,
       b.value AS baseline_value,
       r.value - b.value AS delta,
       b.job_id AS baseline_job_id
FROM results r
JOIN jobs j ON j.id = r.job
JOIN experiment_jobs ej ON ej.job = j.id
JOIN experiments e ON e.id = ej.experiment
LEFT JOIN LATERAL (
    SELECT bj.id AS job_id, br.value
    FROM jobs bj
    JOIN results br ON br.job = bj.id AND br.name = r.name AND br.final
    WHERE bj.kind = 'baseline'
      AND bj.spec -> 'model' ->> 'digest' IS NOT DISTINCT FROM j.spec -> 'model' ->> 'digest'
      AND bj.spec -> 'dataset' ->> 'digest' IS NOT DISTINCT FROM j.spec -> 'dataset' ->> 'digest'
      AND bj.spec -> 'dataset' -> 'ctx' IS NOT DISTINCT FROM j.spec -> 'dataset' -> 'ctx'
      AND bj.spec -> 'dataset' -> 'max_chunks' IS NOT DISTINCT FROM
          j.spec -> 'dataset' -> 'max_chunks'
    ORDER BY (bj.spec ->> 'numerics_version' IS NOT DISTINCT FROM
              j.spec ->> 'numerics_version') DESC,
             bj.id DESC
    LIMIT 1) b ON true
WHERE j.kind = 'eval' AND r.final;
