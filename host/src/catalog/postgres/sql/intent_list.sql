-- $1 dataset_id. Every intent of the dataset, oldest first: by creation time, then by
-- operation id in byte order (the "C" collation), as the object-store backend sorts them.
-- The body comes back as JSON text for `Intent::from_json`, which checks its format version.
SELECT operation_id, phase, body::text AS body
FROM intents
WHERE dataset_id = $1
ORDER BY created_at_ms, operation_id
