-- $1 dataset_id, $2 batch format version, then one entry per batch, in append order: $3 its
-- newest record's time (ms), $4 its oldest record's time (ms), $5 how many records it holds,
-- $6 its body (the batch's bytes).
--
-- One statement, so an append is written whole or not at all. Rows go in by their position in
-- the arrays, and `seq` is drawn as each row is inserted, so it grows in append order. Fails
-- on the foreign key if the dataset does not exist (mapped to NotFound); the check takes only a
-- KEY SHARE lock on the dataset's row, which leaves the row, and a concurrent publish, alone.
INSERT INTO audit (
    dataset_id, format_version, recorded_at_ms, oldest_recorded_at_ms, record_count, records
)
SELECT $1, $2, input.newest_ms, input.oldest_ms, input.record_count, input.records
FROM UNNEST($3::int8[], $4::int8[], $5::int4[], $6::bytea[]) WITH ORDINALITY
     AS input (newest_ms, oldest_ms, record_count, records, position)
ORDER BY input.position
