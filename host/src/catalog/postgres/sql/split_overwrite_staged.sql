-- $1 dataset_id, $2 split ids, $3 nodes, $4 metadata, $5 time range starts, $6 time range
-- ends, $7 updated at (ms).
--
-- Replaces the content of rows that are still staged. created_at_ms keeps the time of the first
-- write; updated_at_ms, which the staged grace period counts from, moves. Returns the ids it
-- changed.
UPDATE splits
SET node = input.node,
    metadata = input.metadata::jsonb,
    time_range_start_ms = input.time_range_start_ms,
    time_range_end_ms = input.time_range_end_ms,
    updated_at_ms = $7
FROM UNNEST($2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[])
     AS input (split_id, node, metadata, time_range_start_ms, time_range_end_ms)
WHERE splits.dataset_id = $1
  AND splits.split_id = input.split_id
  AND splits.state = 'staged'
RETURNING splits.split_id
