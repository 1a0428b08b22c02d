-- $1 dataset_id, $2 operation_id. Returns the operation id if the intent existed.
DELETE FROM intents
WHERE dataset_id = $1 AND operation_id = $2
RETURNING operation_id
