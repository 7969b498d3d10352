-- A shared PostgreSQL server for qsweep. Run once as a superuser with psql;
-- replace the three names in <> and the passwords (or use certificate / Kerberos
-- authentication and drop the PASSWORD clauses). The qsweep migrations themselves
-- (schema/003_roles.sql) create the two group roles qsweep_writer and qsweep_reader and grant
-- them what they need on every table and view, present and future; this file makes the
-- database, the login roles that belong to those groups, and the connection rules.
--
--   psql -h db.example -U postgres -f deploy/postgres/shared-server.sql
--   QSWEEP_DB='host=db.example dbname=qsweep user=qsweep_owner' qsweep db migrate

-- Owner: applies migrations (qsweep db migrate), nothing else runs as it.
CREATE ROLE qsweep_owner LOGIN PASSWORD '<owner password>';
CREATE DATABASE qsweep OWNER qsweep_owner;
REVOKE ALL ON DATABASE qsweep FROM PUBLIC;

-- The group roles, as 003_roles.sql creates them (created here so the grants below work
-- before the first migration; 003 leaves existing roles alone).
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

-- The coordinator (and qsweep submit / cancel / requeue / slurm): reads and writes every
-- table through qsweep_writer.
CREATE ROLE qsweep_coordinator LOGIN PASSWORD '<coordinator password>' IN ROLE qsweep_writer;

-- People: one login per researcher, read-only through qsweep_reader (SELECT on tables and
-- views; qsweep status, results, report, plan, psql).
CREATE ROLE "<researcher>" LOGIN PASSWORD '<researcher password>' IN ROLE qsweep_reader;

-- the coordinator stages result rows in a temporary table (coordinator/store/flush.c)
GRANT CONNECT, TEMPORARY ON DATABASE qsweep TO qsweep_writer;
GRANT CONNECT ON DATABASE qsweep TO qsweep_reader;

-- pg_hba.conf lines to go with it (TLS only, SCRAM passwords), then SELECT pg_reload_conf():
--   hostssl qsweep qsweep_owner        10.0.0.0/8  scram-sha-256
--   hostssl qsweep qsweep_coordinator  10.0.0.5/32 scram-sha-256   # the coordinator host
--   hostssl qsweep +qsweep_reader      10.0.0.0/8  scram-sha-256
-- Workers never connect to PostgreSQL: only the coordinator and the commands do.
