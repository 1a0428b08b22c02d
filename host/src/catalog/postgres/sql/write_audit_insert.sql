-- $1 dataset_id, $2 recorded_at_ms, $3 record (the record's JSON bytes)
INSERT INTO write_audit (dataset_id, recorded_at_ms, record) VALUES ($1, $2, $3)
