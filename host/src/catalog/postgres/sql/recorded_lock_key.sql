-- Serialises the requests of one idempotency key for the rest of the transaction, so that two
-- copies of a request sent at once execute once: the second waits, then finds the record.
-- $1 dataset_id, $2 key
SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 7305))
