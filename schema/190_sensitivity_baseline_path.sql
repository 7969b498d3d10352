-- v_sensitivity pairs an eval job with the baseline of its own numerics path: a grid's
-- `numerics` (kinds/spec.h "numerics", schema/180_numerics_pin.sql) is part of its jobs' keys,
-- so the same model and dataset have one baseline job per named path, and the newest of them
-- was paired with every eval job whatever its path (a CPU sweep's deltas against a GPU
-- baseline's perplexity). Among the baselines of the same model and dataset, the one whose
-- spec names the eval job's path comes first ("any" and no key are one: neither names a path),
-- then the same numerics_version, then the newest, as before.
CREATE OR REPLACE VIEW v_sensitivity AS
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
    JOIN results br ON br.job = bj.id AND br.name = r.name AND br.step = -1
    WHERE bj.kind = 'baseline'
      AND bj.spec -> 'model' ->> 'digest' =
          coalesce(j.spec -> 'reference_model' ->> 'digest', j.spec -> 'model' ->> 'digest')
      AND bj.spec -> 'dataset' ->> 'digest' = j.spec -> 'dataset' ->> 'digest'
      AND bj.spec -> 'dataset' -> 'ctx' IS NOT DISTINCT FROM j.spec -> 'dataset' -> 'ctx'
      AND bj.spec -> 'dataset' -> 'max_chunks' IS NOT DISTINCT FROM
          j.spec -> 'dataset' -> 'max_chunks'
      AND bj.spec -> 'dataset' -> 'bos_id' IS NOT DISTINCT FROM j.spec -> 'dataset' -> 'bos_id'
    ORDER BY (coalesce(nullif(bj.spec ->> 'numerics', 'any'), '') =
              coalesce(nullif(j.spec ->> 'numerics', 'any'), '')) DESC,
             (bj.spec ->> 'numerics_version' IS NOT DISTINCT FROM
              j.spec ->> 'numerics_version') DESC,
             bj.id DESC
    LIMIT 1) b ON true
WHERE j.kind = 'eval' AND r.final;
