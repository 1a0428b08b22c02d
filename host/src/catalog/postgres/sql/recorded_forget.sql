-- $1 dataset_id, $2 recorded_before_ms
DELETE FROM recorded_requests
WHERE dataset_id = $1 AND recorded_at_ms < $2
