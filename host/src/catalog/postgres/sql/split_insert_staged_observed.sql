-- $1 dataset_id, $2 split ids (sorted), $3 nodes, $4 metadata, $5 time range starts,
-- $6 time range ends, $7 created and updated at (ms).
--
-- Create-only staging with the standard plan as one statement that writes and observes: the
-- insert of split_insert_staged.sql, and the state of every requested id that has a row as
-- this statement's snapshot shows it. Returns (split_id, state): state NULL for an id this
-- statement inserted.
--
-- The read cannot see the insert's own rows (every part of a statement runs on one snapshot,
-- so a data-modifying WITH is invisible to the rest), so it returns the rows that were there
-- when the statement began: each an id the insert left alone. A row a concurrent writer
-- committed while this statement ran is neither: the insert waited for it and left it (DO
-- NOTHING), and the snapshot predates it. Such an id comes back in neither list, and the
-- caller reads its state in a statement of its own, whose snapshot sees it.
--
-- For a batch whose ids all exist (the anchor's shape: writers drawing from one pool of ids)
-- this is one statement where the insert and a read after it were two.
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
)
SELECT inserted.split_id, NULL AS state FROM inserted
UNION ALL
-- One primary-key probe per id, as in split_states.sql (the LIMIT keeps the planner from
-- scanning the whole dataset).
SELECT found.split_id, found.state
FROM UNNEST($2::text[]) AS wanted (split_id)
CROSS JOIN LATERAL (
    SELECT split_id, state
    FROM splits
    WHERE dataset_id = $1 AND split_id = wanted.split_id
    LIMIT 1
) AS found
