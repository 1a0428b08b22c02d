-- $1 dataset_id, $2 split ids (sorted, distinct), $3 nodes, $4 metadata, $5 time range starts,
-- $6 time range ends, $7 created and updated at (ms), $8 the write's record (JSON text) or
-- NULL for none, $9 how many splits the stage was asked for (distinct), $10 whole or nothing.
--
-- Upsert staging as one statement that both writes and observes: it inserts every id that has
-- no row and overwrites every row that is still staged (created_at_ms keeps the time of the
-- first write; updated_at_ms, which the staged grace period counts from, moves). It returns
-- each id it wrote and whether it inserted it (a row this statement inserted has no xmax; one
-- it updated carries the row lock the conflict took). An id it did not return has a row in
-- another state, which it left as it was, but locked (DO UPDATE locks every conflicting row,
-- whether its WHERE lets the update happen or not) until the transaction ends.
--
-- The conflict is resolved on the newest committed version of a row, even one committed after
-- the statement began, so a row inserted by a concurrent writer is overwritten or reported,
-- never missed. Rows are taken in sorted order (byte order, as the caller sorts) so that
-- concurrent batches with overlapping ids wait for each other in one order and never deadlock.
--
-- With a record ($8), the same statement records the write: the host's record without its
-- answer, answered by what the statement did (the splits it did not write were skipped). A
-- stage that writes nothing records nothing. One statement rather than the upsert and then the
-- record's insert: one round trip less while the rows are locked. If the planner refuses what
-- the statement did, the transaction rolls back, the record with it.
WITH written AS (
    INSERT INTO splits (
        dataset_id, split_id, state, node, metadata, time_range_start_ms, time_range_end_ms,
        created_at_ms, updated_at_ms, published_at_ms
    )
    SELECT $1, input.split_id, 'staged', input.node, input.metadata::jsonb,
           input.time_range_start_ms, input.time_range_end_ms, $7, $7, NULL
    FROM UNNEST($2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[])
         AS input (split_id, node, metadata, time_range_start_ms, time_range_end_ms)
    ORDER BY input.split_id COLLATE "C"
    ON CONFLICT (dataset_id, split_id) DO UPDATE
    SET node = EXCLUDED.node,
        metadata = EXCLUDED.metadata,
        time_range_start_ms = EXCLUDED.time_range_start_ms,
        time_range_end_ms = EXCLUDED.time_range_end_ms,
        updated_at_ms = EXCLUDED.updated_at_ms
    WHERE splits.state = 'staged'
    RETURNING split_id, (xmax = 0) AS inserted
),
recorded AS (
    INSERT INTO write_audit (dataset_id, recorded_at_ms, record)
    SELECT $1, $7, convert_to(
        jsonb_set($8::jsonb, '{answer}', jsonb_build_object(
            'inserted', (SELECT count(*) FROM written WHERE inserted),
            'overwritten', (SELECT count(*) FROM written WHERE NOT inserted),
            'skipped', $9::int8 - (SELECT count(*) FROM written)
        ))::text, 'UTF8')
    WHERE $8::text IS NOT NULL AND EXISTS (SELECT 1 FROM written)
)
-- Whole or nothing ($10): the statement is the stage, on a connection of its own with no
-- transaction around it, only if it writes every id; the standard upsert plan refuses a batch
-- that meets any row not staged, so a statement that wrote some ids but not all must not
-- land. It fails then, with the text below in its error, and its inserts, its overwrites and
-- its record are undone with it (the host runs the stage again in a transaction, which
-- answers the refusal). A statement that wrote nothing returns no row and has nothing to
-- undo. The error is a cast of text that is not a number: plain SQL has no RAISE, and the
-- text holds a count from the statement's own rows, so that no plan folds it as a constant.
SELECT split_id, inserted FROM written
WHERE CASE
    WHEN NOT $10::bool OR (SELECT count(*) FROM written) = $9::int8 THEN true
    ELSE ('mend: whole upsert refused: it wrote '
          || (SELECT count(*) FROM written) || ' of ' || $9::int8 || ' splits')::int8 = 0
END
