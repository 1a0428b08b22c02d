-- $1 dataset_id, $2 operation ids. Returns the operation id of every intent it deleted.
DELETE FROM intents
WHERE dataset_id = $1 AND operation_id = ANY($2::text[])
RETURNING operation_id
