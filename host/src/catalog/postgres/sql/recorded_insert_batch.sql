-- $1 dataset_id, $2 keys, $3 request digests, $4 results (JSON text), $5 recorded at (ms);
-- the arrays hold one entry per record. `recorded_insert.sql` for a batch, in one statement.
INSERT INTO recorded_requests (dataset_id, key, request_digest, result, recorded_at_ms)
SELECT $1, input.key, input.request_digest, input.result::jsonb, input.recorded_at_ms
FROM UNNEST($2::text[], $3::text[], $4::text[], $5::int8[])
     AS input (key, request_digest, result, recorded_at_ms)
