-- $1 dataset_id, $2 split ids (sorted), $3 seen at (ms).
--
-- Records the time on the rows still marked whose marks no one has seen; a row seen already
-- keeps its time. Returns the ids it changed.
UPDATE splits
SET mark_seen_at_ms = $3
WHERE dataset_id = $1
  AND split_id = ANY($2::text[])
  AND state = 'marked_for_deletion'
  AND mark_seen_at_ms IS NULL
RETURNING split_id
