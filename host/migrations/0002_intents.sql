-- Intents: the record an operation writes before its first durable effect, which recovery
-- reads to finish or undo whatever a crash left behind.
--
-- `body` holds the whole intent as the host serialised it (`Intent::to_json`) and is the only
-- column read back. The other columns copy fields of the body so that a write can be
-- conditional on them (the phase), a listing can be ordered without parsing every body
-- (creation time, then operation id), and an operator can find intents of a given format with
-- plain SQL. Every write sets them from the same intent as the body.
--
-- No index beyond the primary key: a dataset has a handful of intents at a time (one per
-- operation in flight), so listing them sorts a few rows found by the key's prefix.

CREATE TABLE intents (
    dataset_id     TEXT COLLATE "C" NOT NULL REFERENCES datasets (dataset_id),
    operation_id   TEXT COLLATE "C" NOT NULL,
    format_version INT NOT NULL,
    phase          TEXT NOT NULL CHECK (phase IN ('armed', 'effects_confirmed')),
    body           JSONB NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (dataset_id, operation_id)
);
