-- $1 dataset_id, $2 publish token (NULL clears it), $3 updated at (ms).
UPDATE datasets
SET publish_token = $2,
    manifest_version = manifest_version + 1,
    updated_at_ms = $3
WHERE dataset_id = $1
RETURNING
    dataset_id, uid, config, config_version, checkpoint, manifest_version, publish_token,
    fencing_epoch, created_at_ms, updated_at_ms
