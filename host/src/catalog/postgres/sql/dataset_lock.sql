-- $1 dataset_id.
--
-- Every mutation that changes the published view takes this lock first, so they serialize per
-- dataset and always lock in the same order (dataset, then splits by id). NO KEY UPDATE leaves
-- the KEY SHARE lock that the splits foreign key takes free: concurrent stage inserts do not
-- wait for a publish.
SELECT
    dataset_id, uid, config, config_version, checkpoint, manifest_version, publish_token,
    fencing_epoch, created_at_ms, updated_at_ms
FROM datasets
WHERE dataset_id = $1
FOR NO KEY UPDATE
