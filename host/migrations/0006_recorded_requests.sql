-- Recorded requests: the result of a request that carried an idempotency key, written in the
-- same transaction as the request's effect, so that a retry finds it whenever the effect
-- landed and answers it again instead of executing a second time.
--
-- `result` holds the backend's result as JSON; `request_digest` binds the key to the request
-- it was first used for. gc forgets records older than the dataset's retention, by the index.

CREATE TABLE recorded_requests (
    dataset_id     TEXT COLLATE "C" NOT NULL REFERENCES datasets (dataset_id),
    key            TEXT COLLATE "C" NOT NULL,
    request_digest TEXT NOT NULL,
    result         JSONB NOT NULL,
    recorded_at_ms BIGINT NOT NULL,
    PRIMARY KEY (dataset_id, key)
);

CREATE INDEX recorded_requests_by_time ON recorded_requests (dataset_id, recorded_at_ms);
