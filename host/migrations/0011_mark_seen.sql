-- When a split's mark for deletion was first seen in the catalog; its deletion grace period
-- counts from here (`SplitRow::mark_seen_at_ms`). A mark's own stamp (`updated_at_ms`) is read
-- before the transaction that carries it commits, and a writer paused in between dates it
-- before readers last saw the split published (found by mend-sim, seed 1282375541035437414).
--
-- Rows marked before this column existed have none: garbage collection sees them on its next
-- run and deletes them one grace period later, never sooner than before.
ALTER TABLE splits ADD COLUMN mark_seen_at_ms BIGINT;
