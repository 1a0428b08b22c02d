-- $1 dataset_id, $2 operation_id, then the intent as `intent_update.sql` takes it: $3 phase,
-- $4 format version, $5 kind, $6 owner, $7 lease expires at (ms), $8 created at (ms),
-- $9 updated at (ms), $10 planned (bytes). The intent's phase, and whether it is already that
-- intent in every field; no row if there is no such intent. Read after a conditional update
-- changed nothing, to say why.
SELECT phase,
       (phase, format_version, kind, owner, lease_expires_at_ms, created_at_ms, updated_at_ms,
        planned)
       IS NOT DISTINCT FROM ($3, $4, $5, $6, $7, $8, $9, $10) AS unchanged
FROM intents
WHERE dataset_id = $1 AND operation_id = $2
