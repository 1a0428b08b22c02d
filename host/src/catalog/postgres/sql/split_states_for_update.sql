-- $1 dataset_id, $2 split ids.
--
-- Rows are locked in id order (the sort runs below the lock), the same order every writer
-- uses, so two transactions with overlapping ids wait for each other instead of deadlocking.
SELECT split_id, state
FROM splits
WHERE dataset_id = $1 AND split_id = ANY($2::text[])
ORDER BY split_id
FOR UPDATE
