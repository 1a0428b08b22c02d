-- $1 dataset_id. Every intent of the dataset, in no order: `intents.rs` sorts them oldest
-- first (by creation time, then operation id in byte order), as the object-store backend does,
-- and says why there. A format 3 row comes back as its columns and its plan's bytes; a row of
-- format 1 or 2 as its body's JSON text, the only place its fields are (`intents.rs` reads
-- either, after checking the format version).
SELECT operation_id, phase, format_version, kind, owner, lease_expires_at_ms, created_at_ms,
       updated_at_ms, planned,
       CASE WHEN planned IS NULL THEN body::text END AS body
FROM intents
WHERE dataset_id = $1
