-- $1 dataset_id, $2 key
SELECT key, request_digest, result::text AS result, recorded_at_ms
FROM recorded_requests
WHERE dataset_id = $1 AND key = $2
