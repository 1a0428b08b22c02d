-- $1 dataset_id, $2 limit (NULL for all). The dataset's rows that can hold its newest $2
-- records (all of them without a limit); the host decodes their records, sorts them (by
-- recorded time, then `seq`, then place in the row) and keeps the newest $2.
--
-- `newest_rows` walks the dataset's index backwards, newest row first, and stops after $2 rows:
-- each row holds a record at least as new as any of a later row, so the newest $2 records
-- are among the first $2 rows. Walking, it sums the rows' record counts and keeps the oldest
-- record time so far; `bound` is that oldest time at the row where the count reaches $2.
-- The newest $2 records are all at least that new, so the rows kept are those whose newest
-- record is too (the host's `catalog/recent_audit.rs` has the whole argument). Only the kept
-- rows' bodies are read. A row of format 1 holds its record in `body` (JSON, read as text), a
-- batch in `records`.
WITH newest_rows AS (
    SELECT seq,
           recorded_at_ms,
           sum(record_count) OVER walk AS records_so_far,
           min(COALESCE(oldest_recorded_at_ms, recorded_at_ms)) OVER walk AS oldest_so_far
    FROM audit
    WHERE dataset_id = $1
    WINDOW walk AS (ORDER BY recorded_at_ms DESC, seq DESC ROWS UNBOUNDED PRECEDING)
    ORDER BY recorded_at_ms DESC, seq DESC
    LIMIT $2
),
bound AS (
    SELECT oldest_so_far FROM newest_rows WHERE records_so_far >= $2
    ORDER BY records_so_far
    LIMIT 1
)
SELECT audit.seq, audit.dataset_id, audit.operation_id, audit.recorded_at_ms,
       audit.oldest_recorded_at_ms, audit.record_count, audit.body::text AS body, audit.records
FROM newest_rows
JOIN audit USING (seq)
WHERE newest_rows.recorded_at_ms >= COALESCE((SELECT oldest_so_far FROM bound), newest_rows.recorded_at_ms)
