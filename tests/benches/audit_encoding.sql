-- How to store an audit batch on Postgres (migration 0008): 20 batches of 1,000 records of about
-- 1 KB each (a roll-forward's records, with their inputs), stored and read back as `jsonb`,
-- `json`, `text` and `bytea` (compressed, as Postgres compresses a large value by default, and
-- not), against the same records as a row each (`jsonb`, as migration 0003 stored them):
--
--     scripts/with-postgres bash -c 'psql "$MEND_TEST_DATABASE_URL" -f tests/benches/audit_encoding.sql'
--
-- Only the server's work is timed (`\timing`): an `INSERT ... SELECT` from a staging table (the
-- value built from text, then stored), and a binary `COPY` to /dev/null (what a client reading
-- the column receives: `jsonb` is sent as text, built back from its binary form). `text` is
-- written with `|| ''` so that Postgres compresses it afresh rather than copy the staging
-- table's compressed value. The sizes are the tables' with their TOAST.
\set ON_ERROR_STOP on
SHOW server_version;
SHOW default_toast_compression;
DROP TABLE IF EXISTS staging, records_text, per_record, batch_jsonb, batch_json, batch_text, batch_bytea, batch_bytea_plain;
CREATE TABLE staging AS
SELECT b AS batch, '[' || string_agg(format(
  '{"format_version":1,"dataset_id":"bench-%s","operation_id":"op-%s-%s","recorded_at_ms":%s,"mode":"roll-forward","policy_digest":"sha256:%s","semantics_revision":1,"inputs_hash":"sha256:%s","decision":{"roll-forward":{"publish":["split-%s"]}},"outcome":"executing","inputs":{"call":"decide-recovery","dataset_id":"bench-%s","mode":"roll-forward","now_ms":%s,"intent":{"operation_id":"op-%s-%s","kind":"commit","phase":"armed","owner_lease_live":false,"planned_rows":["split-%s"],"rows":[{"split_id":"split-%s","state":"staged"}],"objects":[{"split_id":"split-%s","present":true,"size":%s,"checksum_matches":true}],"publish_staged":["split-%s"],"publish_replaced":[],"has_checkpoint_delta":false,"checkpoint_at_from":false,"checkpoint_at_to":false,"checkpoint_reached_to":false,"gc_splits":[],"mark_splits":[],"config_at_expected":false,"config_applied":false}},"principal":"supervisor@replica-1"}',
  b, b, i, 1700000000000 + b * 1000 + i, md5(i::text) || md5(b::text), md5((i*7)::text) || md5((b*3)::text), lpad(i::text, 6, '0'), b, 1700000000000 + b*1000, b, i, lpad(i::text,6,'0'), lpad(i::text,6,'0'), lpad(i::text,6,'0'), 1000 + i, lpad(i::text,6,'0')), ',' ORDER BY i) || ']' AS body
FROM generate_series(1, 20) b, generate_series(1, 1000) i GROUP BY b;
SELECT count(*) AS batches, avg(octet_length(body))::int AS bytes_per_batch FROM staging;
CREATE TABLE per_record (seq BIGSERIAL PRIMARY KEY, body JSONB NOT NULL);
CREATE TABLE batch_jsonb (seq BIGSERIAL PRIMARY KEY, body JSONB NOT NULL);
CREATE TABLE batch_json (seq BIGSERIAL PRIMARY KEY, body JSON NOT NULL);
CREATE TABLE batch_text (seq BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE batch_bytea (seq BIGSERIAL PRIMARY KEY, body BYTEA NOT NULL);
CREATE TABLE batch_bytea_plain (seq BIGSERIAL PRIMARY KEY, body BYTEA NOT NULL);
ALTER TABLE batch_bytea_plain ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE records_text AS SELECT batch, e::text AS body FROM staging, jsonb_array_elements(body::jsonb) e;
\timing on
-- writes: the server's share of an append (parse and store), 20 appends of 1,000
\echo 'store: a row per record, jsonb'
INSERT INTO per_record (body) SELECT body::jsonb FROM records_text;
\echo 'store: a row per batch, jsonb'
INSERT INTO batch_jsonb (body) SELECT body::jsonb FROM staging;
\echo 'store: a row per batch, json'
INSERT INTO batch_json (body) SELECT body::json FROM staging;
\echo 'store: a row per batch, text'
INSERT INTO batch_text (body) SELECT body || '' FROM staging;
\echo 'store: a row per batch, bytea'
INSERT INTO batch_bytea (body) SELECT convert_to(body, 'UTF8') FROM staging;
\echo 'store: a row per batch, bytea uncompressed'
INSERT INTO batch_bytea_plain (body) SELECT convert_to(body, 'UTF8') FROM staging;
-- reads: what a listing sends (binary COPY is the wire format sqlx reads: jsonb goes out as text)
\echo 'read: a row per record, jsonb'
COPY (SELECT body FROM per_record) TO '/dev/null' WITH (FORMAT binary);
\echo 'read: a row per batch, jsonb'
COPY (SELECT body FROM batch_jsonb) TO '/dev/null' WITH (FORMAT binary);
\echo 'read: a row per batch, json'
COPY (SELECT body FROM batch_json) TO '/dev/null' WITH (FORMAT binary);
\echo 'read: a row per batch, text'
COPY (SELECT body FROM batch_text) TO '/dev/null' WITH (FORMAT binary);
\echo 'read: a row per batch, bytea'
COPY (SELECT body FROM batch_bytea) TO '/dev/null' WITH (FORMAT binary);
\echo 'read: a row per batch, bytea uncompressed'
COPY (SELECT body FROM batch_bytea_plain) TO '/dev/null' WITH (FORMAT binary);
\timing off
SELECT relname, pg_size_pretty(pg_total_relation_size(oid)) FROM pg_class WHERE relname IN ('per_record','batch_jsonb','batch_json','batch_text','batch_bytea','batch_bytea_plain') ORDER BY 1;
DROP TABLE staging, records_text, per_record, batch_jsonb, batch_json, batch_text, batch_bytea, batch_bytea_plain;
