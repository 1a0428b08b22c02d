-- $1 dataset_id, $2 new checkpoint (NULL keeps it), $3 updated at (ms).
UPDATE datasets
SET checkpoint = COALESCE($2::jsonb, checkpoint),
    manifest_version = manifest_version + 1,
    updated_at_ms = $3
WHERE dataset_id = $1
RETURNING manifest_version
