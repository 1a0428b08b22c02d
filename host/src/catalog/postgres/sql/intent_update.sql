-- $1 dataset_id, $2 operation_id, $3 expected phase, $4 new phase, $5 format version, $6 kind,
-- $7 owner, $8 lease expires at (ms), $9 created at (ms), $10 updated at (ms),
-- $11 planned (bytes).
--
-- Replaces the intent only if it is still in the expected phase, and only if the new intent
-- differs from the stored one in any field: a replacement that would change nothing writes
-- nothing. A row of format 1 or 2 (its fields in `body`, these columns NULL) always differs,
-- and is written in format 3. A lease never moves back: an intent carrying an earlier lease
-- than the stored one (a confirmation written from an intent read before a heartbeat landed)
-- keeps the stored lease (in `body` for a row of format 1 or 2). Returns the operation id if
-- it replaced the row; no row means the caller must look why (gone, another phase, or
-- unchanged). The row lock this UPDATE takes is the only lock: nothing else is serialised
-- behind an intent's lease renewal.
UPDATE intents
SET phase = $4,
    format_version = $5,
    kind = $6,
    owner = $7,
    lease_expires_at_ms = GREATEST(
        $8::bigint,
        COALESCE(lease_expires_at_ms, (body ->> 'lease_expires_at_ms')::bigint)
    ),
    created_at_ms = $9,
    updated_at_ms = $10,
    planned = $11,
    body = jsonb_build_object('format_version', $5::int)
WHERE dataset_id = $1
  AND operation_id = $2
  AND phase = $3
  AND (phase, format_version, kind, owner, lease_expires_at_ms, created_at_ms, updated_at_ms,
       planned)
      IS DISTINCT FROM ($4, $5, $6, $7, $8, $9, $10, $11)
RETURNING operation_id
