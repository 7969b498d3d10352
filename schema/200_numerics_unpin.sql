-- One vocabulary for numerics paths, and pins that can be removed.
--   attempts.numerics_path: the path the attempt's worker announced in its HELLO
--     (workers.numerics_path at the attempt's start: cpu-qsweep-fixed2, cpu-openblas-...,
--     cuda-cc90-auto), the vocabulary of experiment_numerics and a grid's `numerics`. Filled by
--     a trigger from the worker's row, which the coordinator writes before the attempt in the
--     same transaction. Attempts made before this column existed take the CPU path their
--     result recorded (cpu_path.<path>, the same text the worker announced); a GPU attempt's
--     result names its GEMM path only, so those stay NULL.
--   v_numerics_path.worker_path: that path for the attempt whose result gave `path`, so a job's
--     result path (cpu-..., gpu-<gemm path>) joins experiment_numerics.path.
--   numerics_unpin_requests: `qsweep unpin`'s requests to a running coordinator, which holds
--     the pins in memory; it answers each with outcome unpinned, refused (a job of the
--     experiment runs on the pinned path) or not_pinned, and a message.
ALTER TABLE attempts ADD COLUMN numerics_path text;

UPDATE attempts a SET numerics_path = substr(r.name, length('cpu_path.') + 1)
FROM results r
WHERE r.job = a.job AND r.attempt = a.attempt AND r.final AND r.name LIKE 'cpu\_path.%';

CREATE FUNCTION qsweep_attempt_numerics_path() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT w.numerics_path INTO NEW.numerics_path FROM workers w WHERE w.id = NEW.worker;
    RETURN NEW;
END
$$;

CREATE TRIGGER attempts_numerics_path BEFORE INSERT ON attempts
    FOR EACH ROW WHEN (NEW.numerics_path IS NULL) EXECUTE FUNCTION qsweep_attempt_numerics_path();

CREATE OR REPLACE VIEW v_numerics_path AS
SELECT DISTINCT ON (r.job)
       r.job AS job_id,
       CASE WHEN r.name LIKE 'cpu\_path.%' THEN substr(r.name, length('cpu_path.') + 1)
            ELSE 'gpu-' || substr(r.name, length('gemm_path.') + 1) END AS path,
       r.attempt,
       (SELECT a.numerics_path FROM attempts a
        WHERE a.job = r.job AND a.attempt = r.attempt) AS worker_path
FROM results r
WHERE r.final
  AND (r.name LIKE 'cpu\_path.%' OR (r.name LIKE 'gemm\_path.%' AND r.name <> 'gemm_path.cpu'))
ORDER BY r.job, r.attempt DESC, (r.name LIKE 'cpu\_path.%') DESC, r.created_at DESC;

CREATE TABLE numerics_unpin_requests (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    experiment   bigint NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    requested_at timestamptz NOT NULL DEFAULT now(),
    handled_at   timestamptz,
    outcome      text CHECK (outcome IN ('unpinned', 'refused', 'not_pinned')),
    message      text,
    CHECK ((handled_at IS NULL) = (outcome IS NULL))
);
CREATE INDEX numerics_unpin_requests_open_idx ON numerics_unpin_requests (id)
    WHERE handled_at IS NULL;
