-- $1 dataset_id, $2 operation ids (sorted), $3 the operation ids whose whole intent is wanted.
--
-- The intents a batch settles that exist, locked until the transaction ends, so that no
-- abandonment, renewal or confirmation lands between the batch's check of a phase or a lease
-- and its delete. Each intent write is one statement holding no other lock, so this cannot
-- deadlock with them. Whole intents (as `intent_list.sql` returns each) are read only where
-- the batch checks the lease (abandonments); `wanted` says which.
SELECT operation_id, phase, operation_id = ANY($3::text[]) AS wanted, format_version, kind,
       owner, lease_expires_at_ms, created_at_ms, updated_at_ms,
       CASE WHEN operation_id = ANY($3::text[]) THEN planned END AS planned,
       CASE WHEN operation_id = ANY($3::text[]) AND planned IS NULL THEN body::text END AS body
FROM intents
WHERE dataset_id = $1 AND operation_id = ANY($2::text[])
ORDER BY operation_id
FOR UPDATE
