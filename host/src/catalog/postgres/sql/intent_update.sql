-- $1 dataset_id, $2 operation_id, $3 expected phase, $4 new phase, $5 format version,
-- $6 body (JSON text), $7 created at (ms).
--
-- Replaces the intent only if it is still in the expected phase, and only if the new body
-- differs: a replacement that would change nothing writes nothing. A lease never moves back:
-- a body carrying an earlier lease than the stored one (a confirmation written from an intent
-- read before a heartbeat landed) keeps the stored lease. Returns the operation id if it
-- replaced the row; no row means the caller must look why (gone, another phase, or
-- unchanged). The row lock this UPDATE takes is the only lock: nothing else is serialised
-- behind an intent's lease renewal.
UPDATE intents
SET phase = $4,
    format_version = $5,
    body = CASE
        WHEN (body ->> 'lease_expires_at_ms')::bigint
             > ($6::jsonb ->> 'lease_expires_at_ms')::bigint
        THEN jsonb_set($6::jsonb, '{lease_expires_at_ms}', body -> 'lease_expires_at_ms')
        ELSE $6::jsonb
    END,
    created_at_ms = $7
WHERE dataset_id = $1
  AND operation_id = $2
  AND phase = $3
  AND body <> $6::jsonb
RETURNING operation_id
