-- GPU workers: what each worker offers and what each job asks, for SQL.
-- workers.gpus is the JSON array the coordinator stores from each HELLO
-- ([{"name", "memory_mb", "cc", "native_fp4"}], coordinator/server/handlers.c); jobs.resources
-- is {"gpus", "gpu_mem_mb"} plus "native_fp4": true when asked (kinds/resources.h computes
-- them at submission; an absent key means none asked).

-- One row per GPU of every worker; gpu is its index in the worker's --gpus order (a job
-- needing k GPUs runs on the first k).
CREATE VIEW v_worker_gpus AS
SELECT w.id AS worker,
       (g.ordinality - 1)::int AS gpu,
       g.value ->> 'name' AS name,
       (g.value ->> 'memory_mb')::bigint AS memory_mib,
       g.value ->> 'cc' AS compute_capability,
       COALESCE((g.value ->> 'native_fp4')::boolean, false) AS native_fp4,
       w.left_at IS NULL AS registered
FROM workers w
CROSS JOIN LATERAL jsonb_array_elements(CASE jsonb_typeof(w.gpus) WHEN 'array' THEN w.gpus
                                        ELSE '[]'::jsonb END) WITH ORDINALITY AS g(value, ordinality);

-- What every job asks of a worker: GPU count, memory per GPU (MiB), native FP4; zeros and
-- false for a job that runs anywhere (CPU workers included).
CREATE VIEW v_job_resources AS
SELECT j.id AS job_id,
       j.job_key,
       j.kind,
       j.state,
       COALESCE((j.resources ->> 'gpus')::int, 0) AS gpus,
       COALESCE((j.resources ->> 'gpu_mem_mb')::bigint, 0) AS gpu_mem_mib,
       COALESCE((j.resources ->> 'native_fp4')::boolean, false) AS native_fp4
FROM jobs j;
