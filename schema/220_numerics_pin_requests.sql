-- Pins set by hand (`qsweep pin EXPERIMENT PATH`, docs/gpu.md "Numerics paths and baselines").
--   numerics_unpin_requests.path: the numerics path a `qsweep pin` request pins the experiment
--     to (one path a worker announces: common/numerics_path.h qs_numerics_path_valid); NULL for
--     `qsweep unpin`. The table is the queue of pin changes a running coordinator, which holds
--     the pins in memory, applies: it answers a pin with outcome pinned (also when it replaces
--     another pin that no result of the experiment was computed on), unchanged (already pinned
--     there) or refused, and a message.
ALTER TABLE numerics_unpin_requests ADD COLUMN path text CHECK (path <> '');

ALTER TABLE numerics_unpin_requests DROP CONSTRAINT numerics_unpin_requests_outcome_check;
ALTER TABLE numerics_unpin_requests ADD CONSTRAINT numerics_unpin_requests_outcome_check
    CHECK (outcome IN ('unpinned', 'refused', 'not_pinned', 'pinned', 'unchanged'));
ALTER TABLE numerics_unpin_requests ADD CONSTRAINT numerics_unpin_requests_outcome_kind_check
    CHECK (outcome IS NULL OR outcome = 'refused'
           OR (path IS NULL) = (outcome IN ('unpinned', 'not_pinned')));
