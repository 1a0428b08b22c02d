-- $1 dataset_id. Every intent of the dataset, oldest first: by creation time, then by
-- operation id in byte order (the "C" collation), as the object-store backend sorts them.
-- A format 3 row comes back as its columns and its plan's bytes; a row of format 1 or 2 as
-- its body's JSON text, the only place its fields are (`intents.rs` reads either, after
-- checking the format version).
SELECT operation_id, phase, format_version, kind, owner, lease_expires_at_ms, created_at_ms,
       updated_at_ms, planned,
       CASE WHEN planned IS NULL THEN body::text END AS body
FROM intents
WHERE dataset_id = $1
ORDER BY created_at_ms, operation_id
