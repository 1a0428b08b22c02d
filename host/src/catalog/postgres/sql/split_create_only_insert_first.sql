-- $1 dataset_id, $2 split ids (sorted), $3 nodes, $4 metadata, $5 time range starts,
-- $6 time range ends, $7 created and updated at (ms), $8 the write's record (JSON text, or NULL).
--
-- Create-only staging with the standard plan, insert first (the catalog's choice for a
-- dataset whose last such stage inserted every id; split_create_only_probe_first.sql is the
-- other): one statement that writes and observes, the insert of split_insert_staged.sql and
-- the state of every other requested id that has a row, as this statement's snapshot shows
-- it. Returns (split_id, state): state NULL for an id this statement inserted.
--
-- The read cannot see the insert's own rows (every part of a statement runs on one snapshot,
-- so a data-modifying WITH is invisible to the rest), so it returns the rows that were there
-- when the statement began: each an id the insert left alone. A row a concurrent writer
-- committed while this statement ran is neither: the insert waited for it and left it (DO
-- NOTHING), and the snapshot predates it. Such an id comes back in neither list, and the
-- caller reads its state in a statement of its own, whose snapshot sees it.
--
-- For a batch of new ids this is the insert alone (no probe: the insert's ids are left out of
-- the read). For a batch whose ids nearly all exist it is an insert of rows that all conflict,
-- each of which may wait for a concurrent writer inserting the same id: probe first instead.
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
-- One primary-key probe per id the insert did not insert, as in split_states.sql (the LIMIT
-- keeps the planner from scanning the whole dataset). The insert's ids are left out first, so
-- a batch of new ids costs no probe at all.
SELECT found.split_id, found.state
FROM (
    SELECT wanted.split_id
    FROM UNNEST($2::text[]) AS wanted (split_id)
    WHERE NOT EXISTS (SELECT 1 FROM inserted WHERE inserted.split_id = wanted.split_id)
) AS met
CROSS JOIN LATERAL (
    SELECT split_id, state
    FROM splits
    WHERE dataset_id = $1 AND split_id = met.split_id
    LIMIT 1
) AS found
