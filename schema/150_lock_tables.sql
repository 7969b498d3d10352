-- The coordinator and submit locks as table locks only qsweep_writer can take. An advisory lock
-- (pg_advisory_lock) needs no privilege at all, so any login, qsweep_reader included, could take
-- the coordinator's key and stop every coordinator. LOCK TABLE in EXCLUSIVE mode needs UPDATE,
-- DELETE or TRUNCATE on the table (PostgreSQL docs, LOCK), and the reader gets no privilege on
-- these tables, not even SELECT (whose ACCESS SHARE lock would not conflict anyway). The tables
-- hold no rows: only their locks matter (docs/security.md).
CREATE TABLE qsweep_coordinator_lock ();
CREATE TABLE qsweep_submit_lock ();
REVOKE ALL ON qsweep_coordinator_lock, qsweep_submit_lock FROM PUBLIC, qsweep_reader;
GRANT SELECT, UPDATE ON qsweep_coordinator_lock, qsweep_submit_lock TO qsweep_writer;
