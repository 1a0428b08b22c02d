-- $1 limit. The rows of every dataset that can hold the catalog's newest $1 records, chosen as
-- `audit_list.sql` chooses a dataset's (the same walk, on the index of every dataset's rows by
-- time): the host decodes their records, sorts them (by recorded time, then `seq`, then place
-- in the row) and keeps the newest $1. One indexed query, which reads the times and counts of
-- at most $1 rows (and the one after them: the window reads a row ahead) and the bodies of the
-- rows kept, however many datasets the catalog holds.
WITH newest_rows AS (
    SELECT seq,
           recorded_at_ms,
           sum(record_count) OVER walk AS records_so_far,
           min(COALESCE(oldest_recorded_at_ms, recorded_at_ms)) OVER walk AS oldest_so_far
    FROM audit
    WINDOW walk AS (ORDER BY recorded_at_ms DESC, seq DESC ROWS UNBOUNDED PRECEDING)
    ORDER BY recorded_at_ms DESC, seq DESC
    LIMIT $1
),
bound AS (
    SELECT oldest_so_far FROM newest_rows WHERE records_so_far >= $1
    ORDER BY records_so_far
    LIMIT 1
)
SELECT audit.seq, audit.dataset_id, audit.operation_id, audit.recorded_at_ms,
       audit.oldest_recorded_at_ms, audit.record_count, audit.body::text AS body, audit.records
FROM newest_rows
JOIN audit USING (seq)
WHERE newest_rows.recorded_at_ms >= COALESCE((SELECT oldest_so_far FROM bound), newest_rows.recorded_at_ms)
