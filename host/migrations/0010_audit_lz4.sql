-- Audit batches compressed with lz4 where the server has it. A recovery sweep appends about
-- 2 MB of records per batch of 1,000 decisions (their `executing` records, and the settled
-- records of the batch before). With the default compression (pglz) each such append took
-- 23.5 ms, with lz4 12.9 ms (`tests/benches/sweep.rs`, timed apart); lz4 compresses the same
-- JSON a little less tightly. Only the rows written from now on are compressed so; older ones
-- stay as they are and are read alike (the server decompresses either way).
--
-- A server built without lz4 refuses the setting; it then keeps pglz, and this migration
-- changes nothing there, rather than stop mend from starting.
DO $$
BEGIN
    ALTER TABLE audit ALTER COLUMN records SET COMPRESSION lz4;
EXCEPTION
    WHEN feature_not_supported OR invalid_parameter_value THEN
        RAISE NOTICE 'lz4 is not available on this server; audit batches stay compressed with pglz';
END
$$;
