-- $1 dataset_id, $2 operation_id, $3 body (JSON text). The intent's phase, and whether its
-- body is already $3; no row if there is no such intent. Read after a conditional update
-- changed nothing, to say why.
SELECT phase, body = $3::jsonb AS unchanged
FROM intents
WHERE dataset_id = $1 AND operation_id = $2
