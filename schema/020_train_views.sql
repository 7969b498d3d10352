-- FP4 training sweeps: loss curves and final metrics of `train` jobs.
-- A train job's spec names its recipe as {"recipe": {"name": "nvfp4", ...}} next to the shape
-- ({"shape": {"name": "tiny", ...}}), learning rate ("lr"), seed ("seed") and the rest of its
-- settings; curve points are results with step >= 0 (train_loss, val_loss, lr, grad_norm,
-- tokens_per_s), final metrics results with step = -1 (final_train_loss, final_val_loss,
-- val_ppl, tokens_seen, wall_s).

-- Every curve point: one row per (job, step, metric).
CREATE VIEW v_train_curves AS
SELECT e.name AS experiment,
       j.id AS job_id,
       j.spec -> 'shape' ->> 'name' AS shape,
       j.spec -> 'recipe' ->> 'name' AS recipe,
       (j.spec ->> 'lr')::double precision AS lr,
       (j.spec ->> 'seed')::bigint AS seed,
       r.step,
       r.name AS metric,
       r.value
FROM results r
JOIN jobs j ON j.id = r.job
JOIN experiment_jobs ej ON ej.job = j.id
JOIN experiments e ON e.id = ej.experiment
WHERE j.kind = 'train' AND r.step >= 0;

-- Every final metric next to the same metric of the bf16 run of the same job but for the
-- recipe: the train job whose spec equals this one's once "recipe" is removed (same shape, lr,
-- seed, steps, data, ...) and whose recipe is bf16. gap = value - bf16_value;
-- rel_gap = gap / bf16_value (the NVFP4 paper's "relative loss error"). NULL until the bf16
-- run has the metric.
CREATE VIEW v_train_final AS
SELECT e.name AS experiment,
       j.id AS job_id,
       j.spec -> 'shape' ->> 'name' AS shape,
       j.spec -> 'recipe' ->> 'name' AS recipe,
       (j.spec ->> 'lr')::double precision AS lr,
       (j.spec ->> 'seed')::bigint AS seed,
       r.name AS metric,
       r.value,
       b.value AS bf16_value,
       r.value - b.value AS gap,
       (r.value - b.value) / NULLIF(b.value, 0) AS rel_gap,
       b.job_id AS bf16_job_id
FROM results r
JOIN jobs j ON j.id = r.job
JOIN experiment_jobs ej ON ej.job = j.id
JOIN experiments e ON e.id = ej.experiment
LEFT JOIN LATERAL (
    SELECT bj.id AS job_id, br.value
    FROM jobs bj
    JOIN results br ON br.job = bj.id AND br.name = r.name AND br.final
    WHERE bj.kind = 'train'
      AND bj.spec -> 'recipe' ->> 'name' = 'bf16'
      AND (bj.spec - 'recipe') = (j.spec - 'recipe')
    ORDER BY bj.id DESC
    LIMIT 1) b ON true
WHERE j.kind = 'train' AND r.final;
