-- results.job -> jobs.id was a foreign key: an index probe plus a row lock on jobs for every
-- result row, which made ingesting metric rows about three times slower than a plain COPY
-- (bench/store). The same rule is now checked once per statement over all rows the statement
-- wrote (a statement-level trigger with a transition table, which also fires for COPY), and
-- a job that has results cannot be deleted.

ALTER TABLE results DROP CONSTRAINT results_job_fkey;

CREATE FUNCTION results_job_exists() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing bigint;
BEGIN
    SELECT w.job INTO missing FROM written w
    WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = w.job) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'results: job % does not exist', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER results_job_exists_insert AFTER INSERT ON results
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION results_job_exists();
CREATE TRIGGER results_job_exists_update AFTER UPDATE ON results
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION results_job_exists();

CREATE FUNCTION jobs_keep_results() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM results r WHERE r.job = OLD.id) THEN
        RAISE EXCEPTION 'jobs: job % (%) has results and cannot be deleted', OLD.id, OLD.job_key
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER jobs_keep_results BEFORE DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_keep_results();
