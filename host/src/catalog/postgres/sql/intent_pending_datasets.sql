-- No parameters. Discovery of pending work (`Catalog::pending_datasets`): each dataset that
-- has intents, with how many and the earliest lease expiry among them, sorted by id in byte
-- order (the "C" collation), as the object-store backend sorts them.
--
-- The table holds only intents in flight, one row per operation that has not been settled, so
-- this reads as many rows as there is pending work, whatever the number of datasets. The
-- primary key (dataset_id, operation_id) delivers them grouped by dataset; no other index is
-- needed. A format 3 row keeps its lease in a column, a row of format 1 or 2 in its body.
SELECT dataset_id,
       count(*) AS intents,
       min(COALESCE(lease_expires_at_ms, (body ->> 'lease_expires_at_ms')::bigint))
           AS earliest_lease_expiry_ms
FROM intents
GROUP BY dataset_id
ORDER BY dataset_id
