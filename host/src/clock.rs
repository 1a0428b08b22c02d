//! Time, behind a trait so that tests control it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::model::TimestampMs;

/// Where the engine reads the time: the system clock in production, a manual one in tests.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> TimestampMs;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> TimestampMs {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as TimestampMs)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `now_ms` until moved.
    pub fn new(now_ms: TimestampMs) -> Self {
        Self {
            now_ms: AtomicI64::new(now_ms),
        }
    }

    /// Moves the clock on by `by_ms` (back, if negative).
    pub fn advance_ms(&self, by_ms: i64) {
        self.now_ms.fetch_add(by_ms, Ordering::SeqCst);
    }

    /// Sets the clock to `now_ms`.
    pub fn set_ms(&self, now_ms: TimestampMs) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> TimestampMs {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// `ms` (since the Unix epoch) as an RFC 3339 UTC timestamp with milliseconds, such as
/// `2026-12-01T06:00:00.123Z`: how people are shown times (tables, error messages); JSON keeps
/// the milliseconds. Outside the years 0000 to 9999, which RFC 3339 cannot write, it is
/// `{ms} ms`.
pub fn rfc3339(ms: TimestampMs) -> String {
    const MS_PER_DAY: i64 = 86_400_000;
    let (days, in_day) = (ms.div_euclid(MS_PER_DAY), ms.rem_euclid(MS_PER_DAY));
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return format!("{ms} ms");
    }
    let (seconds, millis) = (in_day / 1000, in_day % 1000);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// The proleptic Gregorian date of a day counted from 1970-01-01: Howard Hinnant's
/// `civil_from_days` (<https://howardhinnant.github.io/date_algorithms.html>), which counts in
/// 400-year eras of 146,097 days that start on a 1st of March, so that a leap day ends its year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Clamped far outside RFC 3339's years, so that the arithmetic below cannot overflow.
    let days = days.clamp(-1_000_000_000, 1_000_000_000) + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn rfc3339_writes_utc_with_milliseconds() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_796_104_800_123, "2026-12-01T06:00:00.123Z"),
            // A leap day, the last millisecond of a year, and a day before 1970.
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_704_067_199_999, "2023-12-31T23:59:59.999Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (253_402_300_800_000, "253402300800000 ms"),
            (-62_167_219_200_000, "0000-01-01T00:00:00.000Z"),
            (-62_167_219_200_001, "-62167219200001 ms"),
            (i64::MIN, "-9223372036854775808 ms"),
            (i64::MAX, "9223372036854775807 ms"),
        ];
        for (ms, expected) in cases {
            assert_eq!(rfc3339(ms), expected, "{ms}");
        }
        println!("rfc3339: {} cases", cases.len());
    }
}
