-- $1 dataset_id, $2 keys (sorted and distinct by the caller).
--
-- `recorded_lock_key.sql` for every key of a batch, taken one after another in the order of
-- $2: the sorted subquery is scanned in order (a subquery with ORDER BY is not flattened into
-- the outer query), so two transactions locking overlapping keys queue instead of deadlocking.
SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || sorted.key, 7305))
FROM (SELECT key FROM UNNEST($2::text[]) AS input (key) ORDER BY key) AS sorted
