-- $1 dataset_id, $2 operation_id, $3 format version, $4 phase, $5 body (JSON text),
-- $6 created at (ms).
--
-- Fails on the primary key if the operation id is taken (mapped to AlreadyExists) and on the
-- foreign key if the dataset does not exist (mapped to NotFound). The foreign key check takes
-- only a KEY SHARE lock on the dataset's row, which a concurrent publish does not block: an
-- intent is not part of the published view and leaves the dataset row as it is.
INSERT INTO intents (dataset_id, operation_id, format_version, phase, body, created_at_ms)
VALUES ($1, $2, $3, $4, $5::jsonb, $6)
