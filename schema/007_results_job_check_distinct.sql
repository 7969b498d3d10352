-- The results.job check of 004 probed jobs once per written row; a flush writes many rows of
-- few jobs (50 metrics x 100 jobs), so probe each distinct job once.
CREATE OR REPLACE FUNCTION results_job_exists() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing bigint;
BEGIN
    SELECT d.job INTO missing FROM (SELECT DISTINCT w.job FROM written w) d
    WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = d.job) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'results: job % does not exist', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END
$$;
