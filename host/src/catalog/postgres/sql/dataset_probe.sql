-- $1 dataset_id. What a live handle probes on every refresh: the manifest version, and
-- whether any intent is pending, in one row.
SELECT manifest_version,
       EXISTS (SELECT 1 FROM intents WHERE intents.dataset_id = datasets.dataset_id)
FROM datasets
WHERE dataset_id = $1
