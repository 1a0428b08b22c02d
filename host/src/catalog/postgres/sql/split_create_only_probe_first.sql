-- $1 dataset_id, $2 split ids (sorted), $3 nodes, $4 metadata, $5 time range starts,
-- $6 time range ends, $7 created and updated at (ms), $8 the write's record (JSON text, or NULL).
--
-- Create-only staging with the standard plan, probe first (the catalog's choice for a dataset
-- whose last such stage met a row that exists; split_create_only_insert_first.sql is the
-- other): one statement that observes and writes, the
-- state of every requested id that has a row, as this statement's snapshot shows it, and the
-- insert (as split_insert_staged.sql) of the ids that had none. Returns (split_id, state):
-- state NULL for an id this statement inserted.
--
-- Reading first, inside the statement, keeps the insert to the ids that were missing: an id a
-- concurrent writer is inserting at the same moment is the only one the insert can wait on,
-- and a batch whose ids nearly all exist (writers drawing from one pool of ids) is a read and
-- an insert of next to nothing, in one round trip.
--
-- A row a concurrent writer committed while this statement ran is in neither answer: the
-- snapshot predates it, and the insert waited for it and left it (DO NOTHING). The caller
-- reads its state in a statement of its own, whose snapshot sees it.
WITH found AS (
    -- One primary-key probe per id, as in split_states.sql (the LIMIT keeps the planner from
    -- scanning the whole dataset).
    SELECT hit.split_id, hit.state
    FROM UNNEST($2::text[]) AS wanted (split_id)
    CROSS JOIN LATERAL (
        SELECT split_id, state
        FROM splits
        WHERE dataset_id = $1 AND split_id = wanted.split_id
        LIMIT 1
    ) AS hit
),
inserted AS (
    INSERT INTO splits (
        dataset_id, split_id, state, node, metadata, time_range_start_ms, time_range_end_ms,
        created_at_ms, updated_at_ms, published_at_ms
    )
    SELECT $1, input.split_id, 'staged', input.node, input.metadata::jsonb,
           input.time_range_start_ms, input.time_range_end_ms, $7, $7, NULL
    FROM UNNEST($2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[])
         AS input (split_id, node, metadata, time_range_start_ms, time_range_end_ms)
    WHERE NOT EXISTS (SELECT 1 FROM found WHERE found.split_id = input.split_id)
    ORDER BY input.split_id COLLATE "C"
    ON CONFLICT (dataset_id, split_id) DO NOTHING
    RETURNING split_id
),
-- The record of the write (`$8`, the host's record without its answer; NULL outside a write
-- scope), in this same statement, answered by what it inserted: a stage that inserts nothing
-- records nothing. A data-modifying WITH runs whether or not the query reads it.
recorded AS (
    INSERT INTO write_audit (dataset_id, recorded_at_ms, record)
    SELECT $1, $7, convert_to(
        jsonb_set($8::jsonb, '{answer}', jsonb_build_object(
            'inserted', (SELECT count(*) FROM inserted),
            'overwritten', 0,
            'skipped', cardinality($2::text[]) - (SELECT count(*) FROM inserted)
        ))::text, 'UTF8')
    WHERE $8::text IS NOT NULL AND EXISTS (SELECT 1 FROM inserted)
)
SELECT inserted.split_id, NULL AS state FROM inserted
UNION ALL
SELECT found.split_id, found.state FROM found
