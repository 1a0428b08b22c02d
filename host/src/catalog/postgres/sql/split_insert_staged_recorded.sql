-- $1 dataset_id, $2 split ids (sorted), $3 nodes, $4 metadata, $5 time range starts,
-- $6 time range ends, $7 created and updated at (ms), $8 the write's record (JSON text),
-- $9 how many splits the stage was asked for.
--
-- split_insert_staged.sql and, in the same statement, the record of the write: the host's
-- record without its answer, answered by what the insert did (the splits it did not insert
-- were skipped). A stage that inserts nothing records nothing. A data-modifying WITH runs
-- whether or not the query reads it.
WITH inserted AS (
    INSERT INTO splits (
        dataset_id, split_id, state, node, metadata, time_range_start_ms, time_range_end_ms,
        created_at_ms, updated_at_ms, published_at_ms
    )
    SELECT $1, input.split_id, 'staged', input.node, input.metadata::jsonb,
           input.time_range_start_ms, input.time_range_end_ms, $7, $7, NULL
    FROM UNNEST($2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[])
         AS input (split_id, node, metadata, time_range_start_ms, time_range_end_ms)
    ORDER BY input.split_id COLLATE "C"
    ON CONFLICT (dataset_id, split_id) DO NOTHING
    RETURNING split_id
),
recorded AS (
    INSERT INTO write_audit (dataset_id, recorded_at_ms, record)
    SELECT $1, $7, convert_to(
        jsonb_set($8::jsonb, '{answer}', jsonb_build_object(
            'inserted', (SELECT count(*) FROM inserted),
            'overwritten', 0,
            'skipped', $9::int8 - (SELECT count(*) FROM inserted)
        ))::text, 'UTF8')
    WHERE EXISTS (SELECT 1 FROM inserted)
)
SELECT split_id FROM inserted
