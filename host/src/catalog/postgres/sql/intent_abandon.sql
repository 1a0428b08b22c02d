-- $1 dataset_id, $2 operation_id, $3 lease expired by (ms, or NULL for whatever the lease),
-- $4 format version, $5 now (ms).
--
-- Moves an `armed` intent to `abandoned` in one statement: the phase and the lease are tested
-- under the row lock this UPDATE takes, so a heartbeat or a confirmation that committed first
-- wins, and one that comes after finds the phase moved and fails. The body is edited in place
-- (phase, format version, update time) so that it stays the one `Intent::from_json` reads.
-- Returns the new body; no row means the caller must look why (gone, another phase, a live
-- lease).
UPDATE intents
SET phase = 'abandoned',
    format_version = $4,
    body = body || jsonb_build_object(
        'phase', 'abandoned',
        'format_version', $4::int,
        'updated_at_ms', $5::bigint
    )
WHERE dataset_id = $1
  AND operation_id = $2
  AND phase = 'armed'
  AND ($3::bigint IS NULL OR (body ->> 'lease_expires_at_ms')::bigint <= $3::bigint)
RETURNING body::text AS body
