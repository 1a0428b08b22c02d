-- $1 dataset_id, $2 split ids. Only rows marked for deletion go; returns the ids deleted.
DELETE FROM splits
WHERE dataset_id = $1
  AND split_id = ANY($2::text[])
  AND state = 'marked_for_deletion'
RETURNING split_id
