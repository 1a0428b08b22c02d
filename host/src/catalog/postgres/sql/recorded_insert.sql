-- $1 dataset_id, $2 key, $3 request_digest, $4 result (JSON text), $5 recorded_at_ms
INSERT INTO recorded_requests (dataset_id, key, request_digest, result, recorded_at_ms)
VALUES ($1, $2, $3, $4::jsonb, $5)
