-- $1 dataset_id, $2 operation_id, $3 lease expired by (ms, or NULL for whatever the lease),
-- $4 format version, $5 now (ms).
--
-- Moves an `armed` intent to `abandoned` in one statement: the phase and the lease are tested
-- under the row lock this UPDATE takes, so a heartbeat or a confirmation that committed first
-- wins, and one that comes after finds the phase moved and fails. A format 3 row changes its
-- phase and update time in place. A row of format 1 or 2 keeps its fields in `body`, which
-- this statement cannot write as format 3 (the plan is encoded by the host): its body is edited
-- in place (phase, update time, and format 2, the first to know the phase), so that it stays
-- one `Intent::from_json` reads. Returns the intent as `intent_list.sql` does; no row means the
-- caller must look why (gone, another phase, a live lease).
UPDATE intents
SET phase = 'abandoned',
    format_version = CASE WHEN planned IS NULL THEN 2 ELSE $4 END,
    updated_at_ms = CASE WHEN planned IS NULL THEN NULL ELSE $5 END,
    body = CASE
        WHEN planned IS NULL THEN body || jsonb_build_object(
            'phase', 'abandoned',
            'format_version', 2,
            'updated_at_ms', $5::bigint
        )
        ELSE jsonb_build_object('format_version', $4::int)
    END
WHERE dataset_id = $1
  AND operation_id = $2
  AND phase = 'armed'
  AND ($3::bigint IS NULL
       OR COALESCE(lease_expires_at_ms, (body ->> 'lease_expires_at_ms')::bigint)
          <= $3::bigint)
RETURNING operation_id, phase, format_version, kind, owner, lease_expires_at_ms,
          created_at_ms, updated_at_ms, planned,
          CASE WHEN planned IS NULL THEN body::text END AS body
