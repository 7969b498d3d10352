-- Roles: qsweep_writer for the coordinator and the qsweep command (reads and writes every
-- table), qsweep_reader for people querying (SELECT on tables and views, nothing else).
-- Roles are cluster-wide, so they are created only when missing; both may log in (they have
-- no password: the cluster's pg_hba.conf decides how they authenticate).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'qsweep_writer') THEN
        CREATE ROLE qsweep_writer LOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'qsweep_reader') THEN
        CREATE ROLE qsweep_reader LOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO qsweep_writer, qsweep_reader;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO qsweep_writer;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO qsweep_writer;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO qsweep_reader;
-- Tables and views added by later migrations get the same grants.
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO qsweep_writer;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO qsweep_writer;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO qsweep_reader;
