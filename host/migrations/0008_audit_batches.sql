-- Audit batches: an append is one row holding up to 1,000 records (a larger append is several
-- rows, in one statement), as the object-store catalog's audit objects of format 2 hold them.
-- A recovery sweep appends a batch of up to 1,000 decisions' records at once, twice per batch;
-- as a row per record (0003) that was 2,000 rows and 2,000 `jsonb` values built per batch.
--
-- A batch row has `format_version` 2 and its records in `records`: the bytes of
-- `{"format_version": 2, "records": [<record>, ...]}`, the body of an audit object of format 2.
-- `bytea`, not `jsonb`: on Postgres 15, storing a batch of 1,000 records (about 1 MB of JSON)
-- took the server about 10 ms as `bytea` and 28 ms as `jsonb` (building the `jsonb` value; a row
-- per record took 17 ms), and sending it back 0.4 ms against 6.5 ms (a `jsonb` value goes out
-- as text, rebuilt from its binary form); both compress to the same size
-- (`tests/benches/audit_encoding.sql`; the book's benchmarks page has a run). The host reads
-- only whole bodies, so `jsonb`'s operators would buy it nothing; an operator reads a batch
-- with `convert_from(records, 'UTF8')::jsonb`.
--
-- Rows written before (format 1, one record each, in `body`) stay as they are and are read
-- with the batches, in order. For every row, `recorded_at_ms` is its newest record's time
-- (its only record's, in a row of one), `oldest_recorded_at_ms` its oldest one's (NULL in a
-- row of one: the same) and `record_count` how many it holds: a listing chooses the rows that
-- can hold the newest records by these columns without reading a body (the host's
-- `catalog/recent_audit.rs`). A batch row's `operation_id` is NULL: its records name theirs.

ALTER TABLE audit
    ALTER COLUMN operation_id DROP NOT NULL,
    ALTER COLUMN body DROP NOT NULL,
    ADD COLUMN oldest_recorded_at_ms BIGINT,
    ADD COLUMN record_count INT NOT NULL DEFAULT 1 CHECK (record_count >= 1),
    ADD COLUMN records BYTEA,
    ADD CONSTRAINT audit_holds_one_body CHECK ((body IS NULL) <> (records IS NULL));

-- The newest records of the whole catalog, which a policy swap replays: read backwards, the
-- index gives the rows newest first, and the counts and oldest times it includes let the walk
-- choose its rows without visiting the table.
CREATE INDEX audit_by_time ON audit (recorded_at_ms, seq)
    INCLUDE (record_count, oldest_recorded_at_ms);
