-- The pipeline stage each job of an experiment belongs to (the stage name of its grid,
-- coordinator/grid/grid_pipeline.c), written by `qsweep submit`: NULL outside a pipeline and
-- for links stored before this column, which a resubmission of the same grid fills in. The
-- names of trained models (`STAGE/shape/recipe/seed=N`) read it.
ALTER TABLE experiment_jobs ADD COLUMN stage text;
