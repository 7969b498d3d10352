-- A compare job (kinds/sensitivity.h "reference_model", the grid's compare_to) scores its
-- model against the baseline of its reference model: v_sensitivity pairs it with that
-- baseline, so its delta is against the parent's perplexity. Every other eval job has no
-- reference_model and is paired as before.
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
    ORDER BY (bj.spec ->> 'numerics_version' IS NOT DISTINCT FROM
              j.spec ->> 'numerics_version') DESC,
             bj.id DESC
    LIMIT 1) b ON true
WHERE j.kind = 'eval' AND r.final;
