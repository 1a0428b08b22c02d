-- The catalog: datasets and their split rows.
--
-- Times are BIGINT milliseconds since the Unix epoch, always passed in by the caller: nothing
-- here reads the server's clock, so tests control time and replays see the same values.
--
-- Ids use the "C" collation so that ORDER BY, paging cursors and the order in which rows are
-- locked agree with Rust's byte-wise string order, whatever the database's default locale.

CREATE TABLE datasets (
    dataset_id       TEXT COLLATE "C" PRIMARY KEY,
    uid              TEXT NOT NULL,
    config           JSONB NOT NULL,
    config_version   BIGINT NOT NULL CHECK (config_version >= 0),
    checkpoint       JSONB NOT NULL,
    manifest_version BIGINT NOT NULL CHECK (manifest_version >= 0),
    publish_token    TEXT,
    created_at_ms    BIGINT NOT NULL,
    updated_at_ms    BIGINT NOT NULL
);

CREATE TABLE splits (
    dataset_id          TEXT COLLATE "C" NOT NULL REFERENCES datasets (dataset_id),
    split_id            TEXT COLLATE "C" NOT NULL,
    state               TEXT NOT NULL
                        CHECK (state IN ('staged', 'published', 'marked_for_deletion')),
    node                TEXT NOT NULL,
    metadata            JSONB NOT NULL,
    time_range_start_ms BIGINT,
    time_range_end_ms   BIGINT,
    created_at_ms       BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    published_at_ms     BIGINT,
    PRIMARY KEY (dataset_id, split_id),
    -- A range has both bounds or none; the decoder treats anything else as corrupt.
    CHECK ((time_range_start_ms IS NULL) = (time_range_end_ms IS NULL))
);

-- Garbage collection lists splits by state and age ("staged, untouched since T").
CREATE INDEX splits_by_state_and_update ON splits (dataset_id, state, updated_at_ms);
