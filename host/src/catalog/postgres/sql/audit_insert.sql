-- $1 dataset_id, $2 format version, $3 operation ids, $4 recorded at (ms), $5 bodies (JSON
-- text); the arrays hold one entry per record, in the order the records were given.
--
-- One statement, so a batch is appended whole or not at all. Rows go in by their position in
-- the arrays, and `seq` is drawn as each row is inserted, so it grows in the order given. Fails
-- on the foreign key if the dataset does not exist (mapped to NotFound); the check takes only a
-- KEY SHARE lock on the dataset's row, which leaves the row, and a concurrent publish, alone.
INSERT INTO audit (dataset_id, operation_id, recorded_at_ms, format_version, body)
SELECT $1, input.operation_id, input.recorded_at_ms, $2, input.body::jsonb
FROM UNNEST($3::text[], $4::int8[], $5::text[]) WITH ORDINALITY
     AS input (operation_id, recorded_at_ms, body, position)
ORDER BY input.position
