-- $1 dataset_id, $2 operation_id. Deletes the intent a commit's publish settles, in the
-- publish's transaction, unless recovery abandoned it: the row lock this DELETE takes orders
-- it with recovery's `intent_abandon.sql`, so exactly one of the two lands. Returns the
-- operation id if it deleted the intent; no row means the caller must look why (gone, or
-- abandoned).
DELETE FROM intents
WHERE dataset_id = $1 AND operation_id = $2 AND phase <> 'abandoned'
RETURNING operation_id
