-- $1 dataset_id, $2 limit (NULL for all): the dataset's newest write records, newest first
-- (by time, then by `seq`), on the index `write_audit_by_time`.
SELECT record FROM write_audit WHERE dataset_id = $1
ORDER BY recorded_at_ms DESC, seq DESC
LIMIT $2
