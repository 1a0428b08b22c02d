-- $1 dataset_id, $2 uid, $3 config, $4 created and updated at (ms). A new dataset starts at
-- config version 1 and manifest version 1, with an empty checkpoint, no publish token and
-- fencing epoch 0.
INSERT INTO datasets (
    dataset_id, uid, config, config_version, checkpoint, manifest_version, publish_token,
    fencing_epoch, created_at_ms, updated_at_ms
)
VALUES ($1, $2, $3, 1, '{}'::jsonb, 1, NULL, 0, $4, $4)
RETURNING
    dataset_id, uid, config, config_version, checkpoint, manifest_version, publish_token,
    fencing_epoch, created_at_ms, updated_at_ms
