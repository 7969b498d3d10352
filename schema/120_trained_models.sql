-- The models a pipeline's training jobs make, and the model each sensitivity job of such a
-- model ran on (coordinator/grid/grid_pipeline.c, docs/pipelines.md). A training job records
-- the BLAKE2b-256 digest of the model it exported as its final metric "model_digest.<hex>"
-- (value 1; worker/train/train_job.c); each baseline and eval job whose spec names the model
-- with "model": {"trained_by": <train job_key>} records the digest of the model it loaded the
-- same way (worker/jobs/jobs.c).
--
-- v_trained_models: one row per training job that recorded one, from its latest attempt that
-- did: the job, its key, the model's folder (checkpoint_dir/<job_key>) and the digest.
CREATE VIEW v_trained_models AS
SELECT DISTINCT ON (r.job)
       r.job AS train_job_id,
       j.job_key AS train_job_key,
       (j.spec ->> 'checkpoint_dir') || '/' || j.job_key AS model_path,
       substr(r.name, length('model_digest.') + 1) AS digest,
       r.attempt
FROM results r
JOIN jobs j ON j.id = r.job
WHERE r.final AND j.kind = 'train' AND r.name LIKE 'model\_digest.%'
ORDER BY r.job, r.attempt DESC;

-- v_trained_model_use: one row per baseline or eval job of a trained model: the training job
-- (by its key in the spec), the digest that job recorded (NULL until it has), the digest the
-- sensitivity job ran on (NULL until it has), and whether the two are equal (NULL while
-- either is missing). A false `matches` is a model written again between the training job's
-- end and the sweep's job (the worker refuses a model whose digest differs from the record
-- beside it, so this needs the record rewritten too: another run of the same training job).
CREATE VIEW v_trained_model_use AS
SELECT j.id AS job_id,
       j.kind,
       t.id AS train_job_id,
       j.spec -> 'model' ->> 'trained_by' AS train_job_key,
       m.digest AS recorded_digest,
       u.digest AS loaded_digest,
       CASE WHEN m.digest IS NULL OR u.digest IS NULL THEN NULL ELSE m.digest = u.digest END
           AS matches
FROM jobs j
LEFT JOIN jobs t ON t.job_key = j.spec -> 'model' ->> 'trained_by'
LEFT JOIN v_trained_models m ON m.train_job_id = t.id
LEFT JOIN LATERAL (
    SELECT substr(r.name, length('model_digest.') + 1) AS digest
    FROM results r
    WHERE r.job = j.id AND r.final AND r.name LIKE 'model\_digest.%'
    ORDER BY r.attempt DESC
    LIMIT 1) u ON true
WHERE j.kind IN ('baseline', 'eval') AND j.spec -> 'model' ? 'trained_by';
