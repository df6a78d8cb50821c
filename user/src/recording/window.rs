//! The part of a recording a report covers: `--from`/`--to` as seconds from the start or as
//! wall-clock times, and the intervals they select.
use anyhow::{anyhow, bail, Result};
use chrono::{DateTime, Local, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};
use serde::Serialize;

/// A point in a recording as the user gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimeSpec {
    /// Seconds from the recording's start.
    Offset(f64),
    /// A wall-clock instant (Unix ms).
    Instant(i64),
    /// A local time of day, on the day the recording ran.
    TimeOfDay(NaiveTime),
}

impl std::str::FromStr for TimeSpec {
    type Err = String;

    /// A duration from the start, in the one syntax of every duration flag (`90`, `90.5`,
    /// `90s`, `1500ms`, `5m`, `1h30m`: `units::parse_duration_s`); `14:05`, `14:05:30` (local
    /// time on the recording's day); `2026-11-24 14:05:30` or `2026-11-24T14:05:30` (local),
    /// with `Z` or `+01:00` (that zone).
    fn from_str(s: &str) -> Result<TimeSpec, String> {
        let t = s.trim();
        if let Ok(v) = crate::units::parse_duration_s(t) {
            return Ok(TimeSpec::Offset(v));
        }
        if t.starts_with('-') || t.parse::<f64>().is_ok() {
            return Err(format!(
                "{s}: a time from the start must be a number of seconds >= 0"
            ));
        }
        for f in ["%H:%M:%S%.f", "%H:%M"] {
            if let Ok(tod) = NaiveTime::parse_from_str(t, f) {
                return Ok(TimeSpec::TimeOfDay(tod));
            }
        }
        if let Ok(d) = DateTime::parse_from_rfc3339(&t.replacen(' ', "T", 1)) {
            return Ok(TimeSpec::Instant(d.timestamp_millis()));
        }
        for f in [
            "%Y-%m-%dT%H:%M:%S%.f",
            "%Y-%m-%d %H:%M:%S%.f",
            "%Y-%m-%dT%H:%M",
            "%Y-%m-%d %H:%M",
        ] {
            if let Ok(n) = NaiveDateTime::parse_from_str(t, f) {
                let local = Local
                    .from_local_datetime(&n)
                    .earliest()
                    .ok_or_else(|| format!("{s}: no such local time"))?;
                return Ok(TimeSpec::Instant(local.timestamp_millis()));
            }
        }
        Err(format!(
            "{s}: not a time; give seconds from the start (90, 5m) or a wall-clock time (14:05:30, 2026-11-24 14:05:30)"
        ))
    }
}

impl TimeSpec {
    /// Seconds from the start of a recording that started at `start_unix_ms` and lasted
    /// `length_s` (wall-clock times need the start).
    pub fn offset_s(&self, start_unix_ms: Option<u64>, length_s: f64) -> Result<f64> {
        let start = || {
            start_unix_ms.map(|v| v as i64).ok_or_else(|| {
                anyhow!("the recording has no wall-clock start time; give seconds from its start")
            })
        };
        Ok(match *self {
            TimeSpec::Offset(s) => s,
            TimeSpec::Instant(ms) => (ms - start()?) as f64 / 1e3,
            TimeSpec::TimeOfDay(tod) => {
                let start_ms = start()?;
                let start_local = Local
                    .timestamp_millis_opt(start_ms)
                    .single()
                    .ok_or_else(|| anyhow!("bad start time"))?;
                let on = |day: NaiveDate| -> Option<f64> {
                    let local = Local.from_local_datetime(&day.and_time(tod)).earliest()?;
                    Some((local.timestamp_millis() - start_ms) as f64 / 1e3)
                };
                let day = start_local.date_naive();
                let today = on(day).ok_or_else(|| anyhow!("{tod}: no such local time on {day}"))?;
                // A recording across midnight: the time of day falls on its second day.
                match day.succ_opt().and_then(on) {
                    Some(next) if today < 0.0 && next <= length_s => next,
                    _ => today,
                }
            }
        })
    }
}

/// The local wall-clock time `secs` after a start at `start_unix_ms`, to the second (to the
/// millisecond when it has a fraction), dated when it is not on the start's day.
pub fn clock_at(secs: f64, start_unix_ms: u64) -> Option<String> {
    let start = Local.timestamp_millis_opt(start_unix_ms as i64).single()?;
    let at = Local
        .timestamp_millis_opt(start_unix_ms as i64 + (secs * 1e3).round() as i64)
        .single()?;
    let time = if at.timestamp_subsec_millis() == 0 {
        "%H:%M:%S"
    } else {
        "%H:%M:%S%.3f"
    };
    Some(if at.date_naive() == start.date_naive() {
        at.format(time).to_string()
    } else {
        at.format(&format!("%Y-%m-%d {time}")).to_string()
    })
}

impl TimeSpec {
    /// Whether the user gave a wall-clock time (not seconds from the start).
    pub fn is_wall_clock(&self) -> bool {
        !matches!(self, TimeSpec::Offset(_))
    }

    /// The point read back in the terms it was given, at `secs` from the start: seconds from
    /// the start, or a wall-clock time (dated when not on the recording's first day).
    pub fn describe(&self, secs: f64, start_unix_ms: Option<u64>) -> String {
        match (self, start_unix_ms) {
            (TimeSpec::Offset(_), _) | (_, None) => format!("{secs:.1} s from its start"),
            (_, Some(start)) => {
                clock_at(secs, start).unwrap_or_else(|| format!("{secs:.1} s from its start"))
            }
        }
    }
}

/// The intervals a report covers.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// True when it is the whole recording.
    pub whole: bool,
    /// First and last interval index covered (inclusive).
    pub first: u64,
    pub last: u64,
    pub intervals: u64,
    /// Seconds from the recording's start to the start and the end of the covered intervals.
    pub from_s: f64,
    pub to_s: f64,
    /// The covered intervals' summed length.
    #[serde(skip)]
    pub dur_ns: u64,
    /// CLOCK_MONOTONIC at the start and the end of the covered intervals.
    #[serde(skip)]
    pub start_ns: u64,
    #[serde(skip)]
    pub end_ns: u64,
}

impl Window {
    pub fn duration_s(&self) -> f64 {
        self.dur_ns as f64 / 1e9
    }
}

/// Check a `--from`/`--to` pair against the recording's length before selecting intervals.
pub fn bounds(
    from: Option<TimeSpec>,
    to: Option<TimeSpec>,
    start_unix_ms: Option<u64>,
    length_s: f64,
) -> Result<(f64, f64)> {
    let from_s = from
        .map(|t| t.offset_s(start_unix_ms, length_s))
        .transpose()?
        .unwrap_or(0.0)
        .max(0.0);
    let to_s = to
        .map(|t| t.offset_s(start_unix_ms, length_s))
        .transpose()?
        .unwrap_or(f64::INFINITY);
    if to_s <= from_s {
        let say = |t: Option<TimeSpec>, v: f64| {
            t.map_or_else(
                || format!("{v:.1} s from its start"),
                |t| t.describe(v, start_unix_ms),
            )
        };
        bail!(
            "--to ({}) is not after --from ({})",
            say(to, to_s),
            say(from, from_s)
        );
    }
    Ok((from_s, to_s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_from_the_start_and_wall_clock() {
        let p = |s: &str| s.parse::<TimeSpec>();
        assert_eq!(p("90"), Ok(TimeSpec::Offset(90.0)));
        assert_eq!(p("1m30s"), Ok(TimeSpec::Offset(90.0)));
        assert_eq!(p("250ms"), Ok(TimeSpec::Offset(0.25)));
        assert_eq!(p("1h"), Ok(TimeSpec::Offset(3600.0)));
        assert!(p("-3").is_err() && p("soon").is_err());
        assert_eq!(
            p("2026-01-02T03:04:05Z"),
            Ok(TimeSpec::Instant(1_767_323_045_000))
        );
        assert_eq!(
            p("2026-01-02 03:04:05+01:00"),
            Ok(TimeSpec::Instant(1_767_323_045_000 - 3_600_000))
        );
        let start = 1_767_323_045_000u64;
        assert_eq!(
            TimeSpec::Instant(start as i64 + 2500)
                .offset_s(Some(start), 10.0)
                .unwrap(),
            2.5
        );
        assert!(TimeSpec::Instant(0).offset_s(None, 10.0).is_err());
        // A time of day resolves against the start, in local time.
        let start_local = Local.timestamp_millis_opt(start as i64).unwrap();
        let later = (start_local + chrono::Duration::seconds(30)).time();
        let TimeSpec::TimeOfDay(tod) = p(&later.format("%H:%M:%S").to_string()).unwrap() else {
            panic!()
        };
        assert!(
            (TimeSpec::TimeOfDay(tod)
                .offset_s(Some(start), 60.0)
                .unwrap()
                - 30.0)
                .abs()
                < 1.0
        );
        // Before midnight to after it: the second day's time.
        let before_midnight = Local
            .from_local_datetime(
                &NaiveDate::from_ymd_opt(2026, 1, 2)
                    .unwrap()
                    .and_hms_opt(23, 59, 0)
                    .unwrap(),
            )
            .unwrap();
        let t = TimeSpec::TimeOfDay(NaiveTime::from_hms_opt(0, 1, 0).unwrap());
        let s = before_midnight.timestamp_millis() as u64;
        assert!((t.offset_s(Some(s), 600.0).unwrap() - 120.0).abs() < 1e-6);
        assert!(bounds(
            Some(TimeSpec::Offset(5.0)),
            Some(TimeSpec::Offset(5.0)),
            None,
            10.0
        )
        .is_err());
        // Read back as given: a time of day stays one, dated off the recording's first day.
        let tod = TimeSpec::TimeOfDay(NaiveTime::from_hms_opt(0, 1, 0).unwrap());
        assert_eq!(tod.describe(120.0, Some(s)), "2026-01-03 00:01:00");
        assert_eq!(tod.describe(-30.0, Some(s)), "23:58:30");
        assert_eq!(
            TimeSpec::Offset(90.0).describe(90.0, Some(s)),
            "90.0 s from its start"
        );
        let e = bounds(Some(tod), Some(TimeSpec::Offset(60.0)), Some(s), 600.0)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--to (60.0 s from its start) is not after --from (2026-01-03 00:01:00)"
        );
        assert_eq!(
            bounds(None, None, None, 10.0).unwrap(),
            (0.0, f64::INFINITY)
        );
    }
}
