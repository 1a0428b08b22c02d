//! Membership leases as rows of `fleet_members` (migration `0007_fleet_members.sql`), timed by
//! the database's clock.
//!
//! A heartbeat is one statement: it renews this replica's row if its lease has not run out
//! and reads every member's row, in one snapshot. A lease found run out (or a first heartbeat)
//! joins instead: an upsert of the row with the next `fleet_epochs` value, then the reading
//! statement again. Joining also deletes rows expired for more than ten leases.
//!
//! The replica's own view of its lease ([`FleetView::lease_live_until`]) is what the row says
//! it has left by the database's clock, counted on the replica's monotonic clock from just
//! before the statement was sent: never later than the database's, whatever the replica's
//! wall clock says.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::PgPool;

use tokio::time::Instant;

use super::{FleetView, Member, Membership, Observed};
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// A replica's membership kept as a row of `fleet_members`; see the module doc.
#[derive(Debug)]
pub struct PostgresMembership {
    pool: PgPool,
    replica_id: String,
    lease: Duration,
    /// The epoch this replica joined with, once joined.
    epoch: Mutex<Option<i64>>,
}

#[derive(sqlx::FromRow)]
struct MemberRow {
    replica_id: Option<String>,
    epoch: Option<i64>,
    expires_at_ms: Option<i64>,
    now_ms: i64,
    renewed_until: Option<i64>,
}

impl PostgresMembership {
    /// The membership of `replica_id` on `pool` (a database whose catalog migrations ran).
    pub fn new(pool: PgPool, replica_id: String, lease: Duration) -> Self {
        Self {
            pool,
            replica_id,
            lease,
            epoch: Mutex::new(None),
        }
    }

    fn epoch(&self) -> std::sync::MutexGuard<'_, Option<i64>> {
        self.epoch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Renews the row of `epoch` if it is still live (an epoch of -1 renews nothing) and reads
    /// every row.
    async fn renew_and_read(&self, epoch: i64) -> Result<Vec<MemberRow>> {
        let statement = format!(
            "WITH now AS (SELECT {NOW_MS} AS ms), \
             renewed AS ( \
                 UPDATE fleet_members SET expires_at_ms = (SELECT ms FROM now) + $3 \
                 WHERE replica_id = $1 AND epoch = $2 AND expires_at_ms > (SELECT ms FROM now) \
                 RETURNING expires_at_ms) \
             SELECT m.replica_id, m.epoch, m.expires_at_ms, now.ms AS now_ms, \
                    (SELECT expires_at_ms FROM renewed) AS renewed_until \
             FROM now LEFT JOIN fleet_members m ON true ORDER BY m.replica_id"
        );
        sqlx::query_as::<_, MemberRow>(&statement)
            .bind(&self.replica_id)
            .bind(epoch)
            .bind(duration_ms(self.lease))
            .fetch_all(&self.pool)
            .await
            .map_err(|error| database_error("renewing this replica's membership", error))
    }

    async fn join(&self) -> Result<i64> {
        let lease_ms = duration_ms(self.lease);
        let statement = format!(
            "INSERT INTO fleet_members (replica_id, epoch, joined_at_ms, expires_at_ms) \
             SELECT $1, nextval('fleet_epochs'), ms, ms + $2 FROM (SELECT {NOW_MS} AS ms) now \
             ON CONFLICT (replica_id) DO UPDATE SET epoch = EXCLUDED.epoch, \
                 joined_at_ms = EXCLUDED.joined_at_ms, expires_at_ms = EXCLUDED.expires_at_ms \
             RETURNING epoch"
        );
        let epoch: i64 = sqlx::query_scalar(&statement)
            .bind(&self.replica_id)
            .bind(lease_ms)
            .fetch_one(&self.pool)
            .await
            .map_err(|error| database_error("joining the fleet", error))?;
        let forget = format!("DELETE FROM fleet_members WHERE expires_at_ms < {NOW_MS} - $1");
        // Best-effort: a dead member's row left behind is only listed as expired.
        let _ = sqlx::query(&forget)
            .bind(lease_ms.saturating_mul(10))
            .execute(&self.pool)
            .await;
        Ok(epoch)
    }
}

#[async_trait]
impl Membership for PostgresMembership {
    fn replica_id(&self) -> &str {
        &self.replica_id
    }

    fn lease_duration(&self) -> Duration {
        self.lease
    }

    async fn heartbeat(&self) -> Result<FleetView> {
        let known = *self.epoch();
        let mut requests = 1;
        // Just before the statement whose rows say what the lease has left: the database's
        // now is no earlier, so the lease counted from here runs out before the database's.
        let mut sent = Instant::now();
        let mut rows = self.renew_and_read(known.unwrap_or(-1)).await?;
        let renewed = rows.first().and_then(|row| row.renewed_until);
        let rejoined = known.is_some() && renewed.is_none();
        let epoch = match (known, renewed) {
            (Some(epoch), Some(_)) => epoch,
            _ => {
                let epoch = self.join().await?;
                // The renewing statement with the new epoch reads the fleet with this row.
                sent = Instant::now();
                rows = self.renew_and_read(epoch).await?;
                requests += 3;
                epoch
            }
        };
        *self.epoch() = Some(epoch);
        let now_ms = rows.first().map_or(0, |row| row.now_ms);
        let mut members = Vec::new();
        let mut expired = Vec::new();
        let mut me = None;
        for row in &rows {
            let (Some(replica_id), Some(row_epoch), Some(mut expires_at_ms)) =
                (row.replica_id.clone(), row.epoch, row.expires_at_ms)
            else {
                continue;
            };
            if replica_id == self.replica_id {
                expires_at_ms = row.renewed_until.unwrap_or(expires_at_ms);
            }
            let member = Member {
                replica_id,
                epoch: u64::try_from(row_epoch).unwrap_or(0),
                expires_at_ms: expires_at_ms as TimestampMs,
            };
            if member.replica_id == self.replica_id {
                me = Some(member.clone());
                members.push(member);
            } else if member.expires_at_ms > now_ms {
                members.push(member);
            } else {
                expired.push(member);
            }
        }
        let me = me.ok_or_else(|| MendError::Unavailable {
            message: format!(
                "replica {} joined the fleet but its row is not there: another process deleted \
                 it; it joins again at the next heartbeat",
                self.replica_id
            ),
            source: None,
        })?;
        if me.expires_at_ms <= now_ms {
            *self.epoch() = None;
        }
        let left_ms = u64::try_from(me.expires_at_ms.saturating_sub(now_ms)).unwrap_or(0);
        Ok(FleetView {
            lease_live_until: sent + Duration::from_millis(left_ms),
            me,
            rejoined,
            members,
            expired,
            requests,
        })
    }

    async fn observe(&self) -> Result<Observed> {
        let rows = self.renew_and_read(-1).await?;
        let now_ms = rows.first().map_or(0, |row| row.now_ms);
        let mut observed = Observed::default();
        for row in rows {
            let (Some(replica_id), Some(epoch), Some(expires_at_ms)) =
                (row.replica_id, row.epoch, row.expires_at_ms)
            else {
                continue;
            };
            let member = Member {
                replica_id,
                epoch: u64::try_from(epoch).unwrap_or(0),
                expires_at_ms,
            };
            if expires_at_ms > now_ms {
                observed.members.push(member);
            } else {
                observed.expired.push(member);
            }
        }
        Ok(observed)
    }

    async fn leave(&self) -> Result<()> {
        let Some(epoch) = self.epoch().take() else {
            return Ok(());
        };
        sqlx::query("DELETE FROM fleet_members WHERE replica_id = $1 AND epoch = $2")
            .bind(&self.replica_id)
            .bind(epoch)
            .execute(&self.pool)
            .await
            .map_err(|error| database_error("leaving the fleet", error))?;
        Ok(())
    }
}

fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn database_error(context: &str, error: sqlx::Error) -> MendError {
    MendError::unavailable(format!("fleet membership: {context}: {error}"), error)
}
