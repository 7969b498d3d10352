-- v_pipeline_sensitivity's options also name the job's method and its options (kinds/method.h;
-- absent for rtn), as `qsweep results` does for a plain sweep (cli/results.c), so a pipeline's
-- sweep over `method` keeps each method's rows apart in v_pipeline_summary instead of averaging
-- them as seeds of one configuration. The view is otherwise schema/130's.
CREATE OR REPLACE VIEW v_pipeline_sensitivity AS
SELECT s.experiment,
       s.job_id,
       s.model,
       s.model_digest,
       s.dataset,
       s.format,
       coalesce(CASE WHEN j.spec ? 'fuse' OR j.spec ? 'method'
                     THEN ((j.spec -> 'format_options') ||
                           CASE WHEN j.spec ? 'fuse'
                                THEN jsonb_build_object('fuse', j.spec -> 'fuse')
                                ELSE '{}' END ||
                           CASE WHEN j.spec ? 'method'
                                THEN jsonb_build_object('method', j.spec -> 'method') ||
                                     coalesce(j.spec -> 'method_options', '{}')
                                ELSE '{}' END)::text
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
