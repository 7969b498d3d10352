-- qsweep core tables: experiments, jobs and their links, attempts, workers, results.
-- Applied once, in one transaction, by coordinator/store/migrate.c (never edit an applied
-- migration: its checksum is recorded in schema_migrations; add a new numbered file).
-- Times are timestamptz (UTC on the wire). Ids are bigint identities.

-- One submitted grid. The grid text is kept verbatim (YAML as written) so an experiment can be
-- re-expanded or audited; grid_json holds the parsed form when the submitter provides it.
CREATE TABLE experiments (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name <> ''),
    description text NOT NULL DEFAULT '',
    grid        text NOT NULL,
    grid_json   jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One unit of work, identified by job_key (a hash of its canonical spec, computed by the
-- submitter), so the same grid point submitted twice or by two experiments is one job.
-- state is written only by the coordinator.
--   resources:  {"gpus": int, "gpu_mem_mb": int}, what a worker must offer to run it.
--   model_key:  the model's identity for scheduling affinity ('' when none).
--   attempts_used: attempts that count against max_attempts (preempted ones do not).
--   not_before: retry backoff; the job is not dispatched before this time.
CREATE TABLE jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_key       text NOT NULL UNIQUE CHECK (job_key <> ''),
    kind          text NOT NULL CHECK (kind <> ''),
    spec          jsonb NOT NULL CHECK (jsonb_typeof(spec) = 'object'),
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    priority      integer NOT NULL DEFAULT 0,
    resources     jsonb NOT NULL DEFAULT '{"gpus": 0, "gpu_mem_mb": 0}'
                  CHECK (jsonb_typeof(resources) = 'object'),
    model_key     text NOT NULL DEFAULT '',
    max_attempts  integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    attempts_used integer NOT NULL DEFAULT 0 CHECK (attempts_used >= 0),
    not_before    timestamptz,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_active_idx ON jobs (id) WHERE state IN ('pending', 'running');

-- Which experiments a job belongs to: a job reused by a second experiment is linked here,
-- never copied.
CREATE TABLE experiment_jobs (
    experiment bigint NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    job        bigint NOT NULL REFERENCES jobs (id),
    PRIMARY KEY (experiment, job)
);
CREATE INDEX experiment_jobs_job_idx ON experiment_jobs (job);

-- A job waits until every job it depends on has succeeded.
CREATE TABLE job_deps (
    job        bigint NOT NULL REFERENCES jobs (id),
    depends_on bigint NOT NULL REFERENCES jobs (id),
    PRIMARY KEY (job, depends_on),
    CHECK (job <> depends_on)
);
CREATE INDEX job_deps_depends_on_idx ON job_deps (depends_on);

-- Worker processes as they introduced themselves (HELLO). id is the worker's own id string.
--   gpus: [{"name": text, "memory_mb": int, "cc": "10.0", "native_fp4": bool}, ...]
CREATE TABLE workers (
    id         text PRIMARY KEY CHECK (id <> ''),
    host       text NOT NULL DEFAULT '',
    pid        integer NOT NULL DEFAULT 0,
    gpus       jsonb NOT NULL DEFAULT '[]',
    threads    integer NOT NULL DEFAULT 0,
    first_seen timestamptz NOT NULL DEFAULT now(),
    last_seen  timestamptz NOT NULL DEFAULT now()
);

-- One try of a job on one worker. attempt numbers count from 1 per job and identify the
-- attempt on the wire together with the job id. lease_expires_at is the coordinator's
-- deadline for the next heartbeat; outcome stays 'running' until the attempt ends.
CREATE TABLE attempts (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job              bigint NOT NULL REFERENCES jobs (id),
    attempt          integer NOT NULL CHECK (attempt >= 1),
    worker           text NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now(),
    ended_at         timestamptz,
    lease_expires_at timestamptz,
    outcome          text NOT NULL DEFAULT 'running'
                     CHECK (outcome IN ('running', 'succeeded', 'failed', 'lost', 'preempted',
                                        'cancelled')),
    error            text,
    UNIQUE (job, attempt)
);
CREATE INDEX attempts_running_idx ON attempts (job) WHERE outcome = 'running';

-- Metrics. step = -1 for the final value, >= 0 for a point on a curve (training loss).
-- One value per (job, name, step), whichever attempt delivered it: duplicates are ignored.
CREATE TABLE results (
    job        bigint NOT NULL REFERENCES jobs (id),
    attempt    integer NOT NULL,
    name       text NOT NULL CHECK (name <> ''),
    value      double precision NOT NULL,
    step       bigint NOT NULL DEFAULT -1 CHECK (step >= -1),
    final      boolean NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, name, step),
    CHECK (final = (step = -1))
);

-- Cancellation requests, written by `qsweep cancel`, polled by the coordinator, which stays
-- the only writer of job state. Exactly one of job / experiment is set.
CREATE TABLE cancel_requests (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job          bigint REFERENCES jobs (id),
    experiment   bigint REFERENCES experiments (id) ON DELETE CASCADE,
    reason       text NOT NULL DEFAULT '',
    requested_at timestamptz NOT NULL DEFAULT now(),
    handled_at   timestamptz,
    CHECK ((job IS NULL) <> (experiment IS NULL))
);
CREATE INDEX cancel_requests_open_idx ON cancel_requests (id) WHERE handled_at IS NULL;
