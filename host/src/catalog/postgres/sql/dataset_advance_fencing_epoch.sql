-- $1 dataset_id, $2 updated at (ms). One statement, atomic by itself: no row means no
-- dataset. The new epoch changes what live handles must see, so the manifest moves too.
UPDATE datasets
SET fencing_epoch = fencing_epoch + 1,
    manifest_version = manifest_version + 1,
    updated_at_ms = $2
WHERE dataset_id = $1
RETURNING
    dataset_id, uid, config, config_version, checkpoint, manifest_version, publish_token,
    fencing_epoch, created_at_ms, updated_at_ms
