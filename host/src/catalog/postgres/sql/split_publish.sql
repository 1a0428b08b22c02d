-- $1 dataset_id, $2 split ids, $3 published and updated at (ms). Returns the ids it changed.
UPDATE splits
SET state = 'published',
    published_at_ms = $3,
    updated_at_ms = $3
WHERE dataset_id = $1
  AND split_id = ANY($2::text[])
  AND state = 'staged'
RETURNING split_id
