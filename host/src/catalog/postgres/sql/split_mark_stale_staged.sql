-- $1 dataset_id, $2 split ids (sorted), $3 now (ms), $4 untouched before (ms).
--
-- Marks only rows that are still staged and untouched since the cutoff, decided by this very
-- statement: a split published or restaged since garbage collection listed it stays as it is.
UPDATE splits
SET state = 'marked_for_deletion',
    updated_at_ms = $3,
    mark_seen_at_ms = $3
WHERE dataset_id = $1
  AND split_id = ANY($2::text[])
  AND state = 'staged'
  AND updated_at_ms < $4
RETURNING split_id
