-- $1 dataset_id.
SELECT
    dataset_id, uid, config, config_version, checkpoint, manifest_version, publish_token,
    fencing_epoch, created_at_ms, updated_at_ms
FROM datasets
WHERE dataset_id = $1
