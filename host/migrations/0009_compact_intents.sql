-- Intent format 3: an intent's fields in columns of their own, and what it plans (its effects
-- and the state it expects) as one compact byte string, `planned` (`host/src/intent/compact.rs`
-- has the layout). A recovery sweep reads every intent of a dataset at once: Postgres hands
-- these columns back as stored, where a JSONB body was converted to text and parsed by the host.
--
-- Rows written before (formats 1 and 2) keep their JSONB `body` and are read from it, as are
-- rows a mend from before format 3 still writes; their new columns stay NULL. A format 3 row
-- holds in `body` only `{"format_version": 3}`: a mend from before format 3 reads nothing else,
-- so it refuses the row as written by a newer mend and asks for an upgrade instead of failing
-- on a missing body. The CHECK below keeps the two forms apart, so that such a mend's write on
-- a format 3 row (an update or an abandonment from an intent it read before the row changed)
-- fails instead of leaving a row whose body and columns disagree.
--
-- `lease_expires_at_ms` is a column for the statements that test or order by the lease
-- (abandonment, a renewal that never moves a lease back, discovery's earliest lease);
-- `updated_at_ms` for abandonment, which sets it in place. They read a format 1 or 2 row's
-- lease from its body.

ALTER TABLE intents
    ADD COLUMN kind                TEXT,
    ADD COLUMN owner               TEXT,
    ADD COLUMN lease_expires_at_ms BIGINT,
    ADD COLUMN updated_at_ms       BIGINT,
    ADD COLUMN planned             BYTEA;

ALTER TABLE intents
    ADD CONSTRAINT intents_stored_form_check CHECK (
        CASE WHEN format_version < 3
             THEN num_nonnulls(kind, owner, lease_expires_at_ms, updated_at_ms, planned) = 0
             ELSE num_nulls(kind, owner, lease_expires_at_ms, updated_at_ms, planned) = 0
        END
    );
