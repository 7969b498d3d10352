-- The numerics path in scheduling (docs/results.md "One numerics path per sweep").
--   workers.numerics_path: the path the worker's jobs run on, as its HELLO announced it (the
--     worker's CPU kernel family, e.g. cpu-qsweep-fixed2, or cuda-cc<NN>-<gemm>); NULL for a
--     worker that announced none.
--   workers.backend_note: why `--backend auto` runs on the CPU ("this build has no CUDA
--     backend", ...); NULL when it does not fall back.
--   experiment_numerics: the path an experiment is pinned to. The coordinator writes the row
--     when it hands the experiment's first job to a worker, in the transaction that starts that
--     attempt, and hands its later jobs only to workers on the same path. A standby coordinator
--     reads the pin from here. A grid's `numerics: any` leaves its experiment unpinned.
ALTER TABLE workers ADD COLUMN numerics_path text, ADD COLUMN backend_note text;

CREATE TABLE experiment_numerics (
    experiment bigint PRIMARY KEY REFERENCES experiments (id) ON DELETE CASCADE,
    path       text NOT NULL CHECK (path <> ''),
    pinned_at  timestamptz NOT NULL DEFAULT now()
);
