-- Audit records: one per recovery decision a sweep acts on, appended and never rewritten.
--
-- `body` holds the whole record as the host serialised it and is the only column read back.
-- The other columns copy fields of the body so that a listing can be ordered and cut to the
-- newest records without parsing every body, and an operator can find records of an operation
-- or a format with plain SQL. `seq` keeps the order of append: records of one batch, or of two
-- batches recorded in the same millisecond, list in the order they were written.
--
-- Unlike intents, a dataset accumulates audit records for as long as it lives, so listing the
-- newest of them reads the index backwards instead of sorting them all.

CREATE TABLE audit (
    seq            BIGSERIAL PRIMARY KEY,
    dataset_id     TEXT COLLATE "C" NOT NULL REFERENCES datasets (dataset_id),
    operation_id   TEXT COLLATE "C" NOT NULL,
    recorded_at_ms BIGINT NOT NULL,
    format_version INT NOT NULL,
    body           JSONB NOT NULL
);

CREATE INDEX audit_by_dataset_and_time ON audit (dataset_id, recorded_at_ms, seq);
