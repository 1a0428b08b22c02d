-- $1 dataset_id, $2 checkpoint (JSON), $3 manifest version, $4 updated at (ms).
--
-- The dataset after a batch of settlements: its checkpoint with every delta applied and its
-- manifest version moved on once per change, as the batch computed them under the dataset's
-- lock. Returns the manifest version written.
UPDATE datasets
SET checkpoint = $2::jsonb,
    manifest_version = $3,
    updated_at_ms = $4
WHERE dataset_id = $1
RETURNING manifest_version
