-- The fleet: one row per `mend serve` replica sharing this catalog, its membership lease.
--
-- A replica renews its row every supervisor interval; `expires_at_ms` is timed by the
-- database's clock (`clock_timestamp()`), so the replicas' own clocks never matter here. A
-- replica that leaves deletes its row; a row past its expiry is a member that died or
-- stalled, and is deleted once it has been expired for ten leases. `epoch` comes from
-- `fleet_epochs` at each joining, so it grows with every joining of any replica.
--
-- The table holds one row per replica, never per dataset: owning datasets writes nothing.

CREATE SEQUENCE fleet_epochs;

CREATE TABLE fleet_members (
    replica_id    TEXT COLLATE "C" PRIMARY KEY,
    epoch         BIGINT NOT NULL,
    joined_at_ms  BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
