-- Job and attempt transitions become HOT updates (heap-only tuples: the new row version goes on
-- the same page and no index gets a new entry). A finished no-op job costs two jobs updates
-- and one attempts update; with a state or outcome column in an index predicate every one of
-- them inserted into every index of its table (jobs: 3, attempts: 3), which was most of the
-- coordinator's per-job database work (bench/coordinator).
--
-- jobs_active_idx and attempts_running_idx only served the coordinator's load, which now
-- starts above the highest job id it has seen (coordinator/store/store.c, qc_store_load) and
-- so reads old rows once, at start. Free space on every page (fillfactor) lets the updated
-- version stay on its page; it applies to pages written from now on.
DROP INDEX jobs_active_idx;
DROP INDEX attempts_running_idx;
ALTER TABLE jobs SET (fillfactor = 80);
ALTER TABLE attempts SET (fillfactor = 80);
