-- Pipelines: a training stage trains models, a sensitivity stage sweeps each of them. A
-- sensitivity job (kind baseline or eval) whose model a pipeline's training job made names it
-- in its spec as {"model": {"trained_by": <the train job's job_key>, "digest": ...}} and
-- depends on it (job_deps). These views put each sweep result next to the training run that
-- made its model: recipe, shape, seed, steps, lr and its final losses (schema/020).

-- The final metrics of a train job (results with step = -1, final): one row per train job
-- that has any.
CREATE VIEW v_train_final_metrics AS
SELECT r.job AS train_job_id,
       max(r.value) FILTER (WHERE r.name = 'final_train_loss') AS final_train_loss,
       max(r.value) FILTER (WHERE r.name = 'final_val_loss') AS final_val_loss,
       max(r.value) FILTER (WHERE r.name = 'val_ppl') AS val_ppl,
       max(r.value) FILTER (WHERE r.name = 'tokens_seen') AS tokens_seen,
       max(r.value) FILTER (WHERE r.name = 'wall_s') AS wall_s
FROM results r JOIN jobs t ON t.id = r.job
WHERE t.kind = 'train' AND r.final
GROUP BY r.job;

-- Each training run whose model a sensitivity job of the experiment uses, whatever its state
-- (a run still training has NULL final metrics), with the count of those sensitivity jobs.
-- The run need not belong to the experiment itself: a reused run of another one counts.
CREATE VIEW v_pipeline_training AS
SELECT e.name AS experiment,
       t.id AS train_job_id,
       t.job_key AS train_job_key,
       t.state,
       t.spec -> 'shape' ->> 'name' AS shape,
       t.spec -> 'recipe' ->> 'name' AS recipe,
       (t.spec ->> 'seed')::bigint AS seed,
       (t.spec ->> 'steps')::bigint AS steps,
       (t.spec ->> 'lr')::double precision AS lr,
       f.final_train_loss,
       f.final_val_loss,
       f.val_ppl,
       f.tokens_seen,
       f.wall_s,
       count(*) AS sensitivity_jobs
FROM experiments e
JOIN experiment_jobs ej ON ej.experiment = e.id
JOIN jobs j ON j.id = ej.job AND j.kind IN ('baseline', 'eval')
JOIN jobs t ON t.job_key = j.spec -> 'model' ->> 'trained_by' AND t.kind = 'train'
LEFT JOIN v_train_final_metrics f ON f.train_job_id = t.id
GROUP BY e.name, t.id, f.final_train_loss, f.final_val_loss, f.val_ppl, f.tokens_seen,
         f.wall_s;

-- Every row of v_sensitivity (one per experiment, eval job and final metric) whose model a
-- training job made, with that run. options: the format's options and, when the job has it,
-- "fuse" (as `qsweep results` groups them); rel_delta = delta / baseline_value (the relative
-- perplexity increase for metric ppl), NULL without a baseline value.
CREATE VIEW v_pipeline_sensitivity AS
SELECT s.experiment,
       s.job_id,
       s.model,
       s.model_digest,
       s.dataset,
       s.format,
       coalesce(CASE WHEN j.spec ? 'fuse'
                     THEN ((j.spec -> 'format_options') ||
                           jsonb_build_object('fuse', j.spec -> 'fuse'))::text
                     ELSE j.spec ->> 'format_options' END, '{}') AS options,
       s.quantize,
       s.mode,
       s.part,
       s.metric,
       s.value,
       s.baseline_value,
       s.delta,
       s.delta / NULLIF(s.baseline_value, 0) AS rel_delta,
       s.baseline_job_id,
       t.id AS train_job_id,
       t.job_key AS train_job_key,
       t.spec -> 'shape' ->> 'name' AS shape,
       t.spec -> 'recipe' ->> 'name' AS recipe,
       (t.spec ->> 'seed')::bigint AS seed,
       (t.spec ->> 'steps')::bigint AS steps,
       (t.spec ->> 'lr')::double precision AS lr,
       f.final_train_loss,
       f.final_val_loss
FROM v_sensitivity s
JOIN jobs j ON j.id = s.job_id
JOIN jobs t ON t.job_key = j.spec -> 'model' ->> 'trained_by' AND t.kind = 'train'
LEFT JOIN v_train_final_metrics f ON f.train_job_id = t.id;

-- The spread over seeds: one row per (experiment, training configuration (shape, steps, lr,
-- recipe), format, options, quantize, mode, part, metric). seeds counts the distinct seeds, n
-- the rows (one per seed unless a seed's model was swept twice in one group); sd_* is the
-- sample standard deviation (NULL for one row). mean_final_val_loss averages the training
-- runs' final validation loss over the same rows.
CREATE VIEW v_pipeline_summary AS
SELECT experiment, shape, steps, lr, recipe, format, options, quantize, mode, part, metric,
       count(DISTINCT seed) AS seeds,
       count(*) AS n,
       avg(value) AS mean_value,
       min(value) AS min_value,
       max(value) AS max_value,
       stddev_samp(value) AS sd_value,
       avg(delta) AS mean_delta,
       min(delta) AS min_delta,
       max(delta) AS max_delta,
       stddev_samp(delta) AS sd_delta,
       avg(rel_delta) AS mean_rel_delta,
       min(rel_delta) AS min_rel_delta,
       max(rel_delta) AS max_rel_delta,
       avg(final_val_loss) AS mean_final_val_loss
FROM v_pipeline_sensitivity
GROUP BY experiment, shape, steps, lr, recipe, format, options, quantize, mode, part, metric;
