-- $1 dataset_id, $2 operation_id. One intent, as `intent_list.sql` returns each; no row if
-- there is none. Read after a conditional update changed nothing, to say why.
SELECT operation_id, phase, format_version, kind, owner, lease_expires_at_ms, created_at_ms,
       updated_at_ms, planned,
       CASE WHEN planned IS NULL THEN body::text END AS body
FROM intents
WHERE dataset_id = $1 AND operation_id = $2
