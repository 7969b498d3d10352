-- The numerics path each baseline and eval job ran on: on the CPU its "cpu_path.<path>" final
-- metric (BLAS, version and kernel family, e.g. cpu-openblas-0.3.21-haswell:
-- worker/jobs/jobs.c), on a GPU "gpu-" and its GEMM path (v_gemm_path). Results of two paths
-- differ in their last digits, so a sweep whose jobs have more than one path is flagged by
-- `qsweep results` and the report. One row per job that recorded one, from its latest attempt
-- that did.
CREATE VIEW v_numerics_path AS
SELECT DISTINCT ON (r.job)
       r.job AS job_id,
       CASE WHEN r.name LIKE 'cpu\_path.%' THEN substr(r.name, length('cpu_path.') + 1)
            ELSE 'gpu-' || substr(r.name, length('gemm_path.') + 1) END AS path,
       r.attempt
FROM results r
WHERE r.final
  AND (r.name LIKE 'cpu\_path.%' OR (r.name LIKE 'gemm\_path.%' AND r.name <> 'gemm_path.cpu'))
ORDER BY r.job, r.attempt DESC, (r.name LIKE 'cpu\_path.%') DESC, r.created_at DESC;
