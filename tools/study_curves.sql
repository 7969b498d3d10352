-- The validation-loss curve of every training run of a pipeline or training experiment, one
-- row per run: each eval_every-th step's validation loss, in step order (v_train_curves,
-- schema/020_train_views.sql). docs/study-fp4-trained-vs-bf16.md reads its steps from it.
--   psql "$QSWEEP_DB" -v experiment=fp4-trained-vs-bf16 -f tools/study_curves.sql
\pset footer off
SELECT coalesce(shape, '(checkpoint)') AS shape, recipe, seed,
       string_agg(step || ':' || to_char(value, 'FM90.0000'), ' ' ORDER BY step) AS val_loss_at_step
FROM v_train_curves
WHERE experiment = :'experiment' AND metric = 'val_loss'
GROUP BY 1, recipe, seed
ORDER BY 1, recipe, seed;
