-- $1 dataset_id, then the filters of a ListQuery; a NULL filter matches every row:
-- $2 states, $3 split ids, $4 and $5 time range start and end (a row without a range never
-- matches), $6 updated since (inclusive), $7 updated before (exclusive), $8 after this split
-- id, $9 row limit (NULL: no limit).
SELECT
    split_id, state, node, metadata, time_range_start_ms, time_range_end_ms, created_at_ms,
    updated_at_ms, published_at_ms, mark_seen_at_ms
FROM splits
WHERE dataset_id = $1
  AND ($2::text[] IS NULL OR state = ANY($2::text[]))
  AND ($3::text[] IS NULL OR split_id = ANY($3::text[]))
  AND ($4::int8 IS NULL OR (time_range_start_ms <= $5::int8 AND time_range_end_ms >= $4::int8))
  AND ($6::int8 IS NULL OR updated_at_ms >= $6::int8)
  AND ($7::int8 IS NULL OR updated_at_ms < $7::int8)
  AND ($8::text IS NULL OR split_id > $8::text)
ORDER BY split_id
LIMIT $9::int8
