-- GPU workers: the GEMM path each job ran with. A baseline or eval job records it
-- as one final metric "gemm_path.<path>" = 1 (worker/jobs/jobs_backend.h), path one of cpu
-- (the CPU backend), fp32 / bf16 (the CUDA backend's cuBLAS GEMMs), native_fp4 (cuBLASLt
-- block-scaled FP4 on compute capability 10.x) or emulated_bf16 (FP4 dequantized to BF16,
-- then a BF16 cuBLASLt GEMM: Hopper). One row per job that has one, from its latest attempt
-- that stored one, so `GROUP BY gemm_path` compares backends.
CREATE VIEW v_gemm_path AS
SELECT DISTINCT ON (r.job)
       r.job AS job_id,
       substr(r.name, length('gemm_path.') + 1) AS gemm_path,
       r.attempt
FROM results r
WHERE r.final AND r.name LIKE 'gemm\_path.%'
ORDER BY r.job, r.attempt DESC, r.created_at DESC;
