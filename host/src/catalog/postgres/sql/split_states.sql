-- $1 dataset_id, $2 split ids. A plain read: it takes no row locks.
-- One primary-key probe per id, in the order of $2 (sorted by the caller): the LIMIT keeps
-- the planner from flattening the lateral join into a scan of the whole dataset, which it
-- prefers for large arrays and which would make every batch cost as much as the dataset.
SELECT found.split_id, found.state
FROM UNNEST($2::text[]) AS wanted (split_id)
CROSS JOIN LATERAL (
    SELECT split_id, state
    FROM splits
    WHERE dataset_id = $1 AND split_id = wanted.split_id
    LIMIT 1
) AS found
ORDER BY found.split_id
