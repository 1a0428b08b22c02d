SELECT
    dataset_id, uid, config, config_version, checkpoint, manifest_version, publish_token,
    fencing_epoch, created_at_ms, updated_at_ms
FROM datasets
ORDER BY dataset_id
