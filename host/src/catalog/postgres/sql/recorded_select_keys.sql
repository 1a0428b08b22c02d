-- $1 dataset_id, $2 keys. The records among them, as `recorded_select.sql` returns each.
SELECT key, request_digest, result::text AS result, recorded_at_ms
FROM recorded_requests
WHERE dataset_id = $1 AND key = ANY($2::text[])
