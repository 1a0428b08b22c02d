-- $1 dataset_id.
SELECT EXISTS (SELECT 1 FROM datasets WHERE dataset_id = $1)
