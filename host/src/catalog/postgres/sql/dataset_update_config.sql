-- $1 dataset_id, $2 config, $3 updated at (ms). The caller holds the dataset's lock and has
-- checked the expected config version.
UPDATE datasets
SET config = $2,
    config_version = config_version + 1,
    manifest_version = manifest_version + 1,
    updated_at_ms = $3
WHERE dataset_id = $1
RETURNING
    dataset_id, uid, config, config_version, checkpoint, manifest_version, publish_token,
    fencing_epoch, created_at_ms, updated_at_ms
