-- Who may speak for a worker and for an attempt (coordinator/server/identity.c).
--   attempts.token_hash: BLAKE2b-256 of the random attempt token sent in the attempt's ASSIGN
--     (proto/qsweep.proto, Assign.attempt_token); a worker re-attaching to the attempt, or
--     reporting it, must present the token. The token itself is never stored or logged.
--   workers.curve_key: the CURVE public key (Z85) of the connection that first registered the
--     worker id; HELLOs for that id from any other key are refused. NULL without CURVE.
ALTER TABLE attempts ADD COLUMN token_hash bytea;
ALTER TABLE workers ADD COLUMN curve_key text;
