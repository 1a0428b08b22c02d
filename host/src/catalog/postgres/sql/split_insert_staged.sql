-- $1 dataset_id, $2 split ids (sorted), $3 nodes, $4 metadata, $5 time range starts,
-- $6 time range ends, $7 created and updated at (ms).
--
-- Returns the ids this statement inserted; an id that already has a row is left exactly as it
-- is (DO NOTHING takes no lock on it). Rows go in sorted by id (byte order, as the caller
-- sorts, whatever the database's default collation) so that concurrent batches with
-- overlapping ids wait for each other in one order and never deadlock.
INSERT INTO splits (
    dataset_id, split_id, state, node, metadata, time_range_start_ms, time_range_end_ms,
    created_at_ms, updated_at_ms, published_at_ms
)
SELECT $1, input.split_id, 'staged', input.node, input.metadata::jsonb, input.time_range_start_ms,
       input.time_range_end_ms, $7, $7, NULL
FROM UNNEST($2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[])
     AS input (split_id, node, metadata, time_range_start_ms, time_range_end_ms)
ORDER BY input.split_id COLLATE "C"
ON CONFLICT (dataset_id, split_id) DO NOTHING
RETURNING split_id
