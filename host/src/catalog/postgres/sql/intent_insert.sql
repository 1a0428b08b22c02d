-- $1 dataset_id, $2 operation_id, $3 phase, $4 format version, $5 kind, $6 owner,
-- $7 lease expires at (ms), $8 created at (ms), $9 updated at (ms), $10 planned (bytes).
--
-- Writes the intent in format 3 (migration 0009): its fields in columns, its plan in `planned`,
-- and in `body` only its format version, which is all a mend from before format 3 reads.
--
-- Fails on the primary key if the operation id is taken (mapped to AlreadyExists) and on the
-- foreign key if the dataset does not exist (mapped to NotFound). The foreign key check takes
-- only a KEY SHARE lock on the dataset's row, which a concurrent publish does not block: an
-- intent is not part of the published view and leaves the dataset row as it is.
INSERT INTO intents (dataset_id, operation_id, phase, format_version, kind, owner,
                     lease_expires_at_ms, created_at_ms, updated_at_ms, planned, body)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, jsonb_build_object('format_version', $4::int))
