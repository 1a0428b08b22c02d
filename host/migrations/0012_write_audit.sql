-- The audit trail of writes (the host's `catalog/write_audit.rs`): one row per write a request
-- made, inserted in the transaction of the write itself, so that no change lands without its
-- record. Kept apart from `audit`, the policy's decisions, which a policy swap replays: a
-- trail of millions of stages must not be in that walk.
--
-- `record` holds the record's JSON bytes (`bytea`, as `audit.records`, for the same reason:
-- the host reads only whole bodies). Rows are read newest first by time, then `seq` (the order
-- their transactions took their numbers in), by the index below: the newest n by time are
-- what a page of the merged trail needs, whatever order the rows were inserted in.

CREATE TABLE write_audit (
    dataset_id     TEXT COLLATE "C" NOT NULL REFERENCES datasets (dataset_id),
    seq            BIGSERIAL NOT NULL,
    recorded_at_ms BIGINT NOT NULL,
    record         BYTEA NOT NULL,
    PRIMARY KEY (dataset_id, seq)
);

CREATE INDEX write_audit_by_time ON write_audit (dataset_id, recorded_at_ms, seq);
