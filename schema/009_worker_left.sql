-- Whether a worker is still there: the coordinator now refreshes workers.last_seen while a
-- worker sends anything (heartbeats included, at most every half lease) and records in
-- left_at when it said BYE or went silent past the coordinator's worker timeout; a HELLO
-- clears it. `qsweep workers` shows connected / silent / left from these two columns.
ALTER TABLE workers ADD COLUMN left_at timestamptz;
