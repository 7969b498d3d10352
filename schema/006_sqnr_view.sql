-- Per-layer output SQNR (dB) of eval jobs, one row per (job, block, linear kind), from the
-- metrics the worker names sqnr_db.<block>.<kind> (kind: q, k, v, o, gate, up, down), ready
-- for a heatmap of block x kind. Other sqnr_db.* metrics (sqnr_db.lm_head) have block NULL
-- and kind set to the rest of the name.
CREATE VIEW v_sqnr AS
SELECT e.name AS experiment,
       j.id AS job_id,
       j.spec -> 'model' ->> 'path' AS model,
       j.spec ->> 'format' AS format,
       j.spec ->> 'quantize' AS quantize,
       j.spec ->> 'mode' AS mode,
       j.spec ->> 'part' AS part,
       -- CASE fixes the order: the cast only sees names that are digits there.
       CASE WHEN r.name ~ '^sqnr_db\.[0-9]{1,9}\.' THEN split_part(r.name, '.', 2)::integer END
           AS block,
       CASE WHEN r.name ~ '^sqnr_db\.[0-9]{1,9}\.'
            THEN substr(r.name, length('sqnr_db.') + length(split_part(r.name, '.', 2)) + 2)
            ELSE substr(r.name, length('sqnr_db.') + 1) END AS kind,
       r.value AS sqnr_db
FROM results r
JOIN jobs j ON j.id = r.job
JOIN experiment_jobs ej ON ej.job = j.id
JOIN experiments e ON e.id = ej.experiment
WHERE r.final AND r.name LIKE 'sqnr\_db.%';
