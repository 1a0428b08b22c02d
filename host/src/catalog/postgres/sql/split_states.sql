-- $1 dataset_id, $2 split ids. A plain read: it takes no row locks.
SELECT split_id, state
FROM splits
WHERE dataset_id = $1 AND split_id = ANY($2::text[])
ORDER BY split_id
