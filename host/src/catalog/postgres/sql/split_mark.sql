-- $1 dataset_id, $2 split ids, $3 updated at (ms), $4 the states a row may be marked from.
-- Returns the ids it changed. A row never published is seen marked at once; a published
-- row's mark is seen by garbage collection (split_see_marks.sql).
UPDATE splits
SET state = 'marked_for_deletion',
    updated_at_ms = $3,
    mark_seen_at_ms = CASE WHEN published_at_ms IS NULL THEN $3 ELSE NULL END
WHERE dataset_id = $1
  AND split_id = ANY($2::text[])
  AND state = ANY($4::text[])
RETURNING split_id
