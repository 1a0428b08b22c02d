-- $1 dataset_id, $2 split ids, $3 updated at (ms), $4 the states a row may be marked from.
-- Returns the ids it changed.
UPDATE splits
SET state = 'marked_for_deletion',
    updated_at_ms = $3
WHERE dataset_id = $1
  AND split_id = ANY($2::text[])
  AND state = ANY($4::text[])
RETURNING split_id
