-- $1 dataset_id, $2 limit (NULL for all). The dataset's audit records, oldest first: by
-- recorded time, then in append order. With a limit, the newest $2 of them, still oldest first:
-- the inner query walks the index backwards and stops after $2 rows (LIMIT NULL is no limit).
-- The body comes back as JSON text, parsed and version-checked by the host.
SELECT operation_id, recorded_at_ms, body
FROM (
    SELECT seq, operation_id, recorded_at_ms, body::text AS body
    FROM audit
    WHERE dataset_id = $1
    ORDER BY recorded_at_ms DESC, seq DESC
    LIMIT $2
) AS newest
ORDER BY recorded_at_ms, seq
