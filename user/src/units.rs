//! How every surface writes a number with a unit: durations, sizes and counts, one formatter
//! each, so the text report, the HTML page and `top` print the same value the same way; and
//! the one syntax every flag reads a duration in.

/// A duration as every flag and `--from`/`--to` read it, in seconds: plain seconds (`90`,
/// `1.5`) or with units (`10s`, `250ms`, `5m`, `1h`, `1h30m`, as humantime reads them).
pub fn parse_duration_s(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let secs = match t.parse::<f64>() {
        Ok(v) => v,
        Err(_) => humantime::parse_duration(t)
            .map_err(|_| format!("{s}: not a duration; give seconds (90) or a number with units (10s, 250ms, 5m, 1h30m)"))?
            .as_secs_f64(),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("{s}: a duration must be a number of seconds >= 0"));
    }
    Ok(secs)
}

/// A `--duration` flag (`record -d`, `top`, `serve`): a duration as [`parse_duration_s`]
/// reads it, more than zero.
pub fn duration_flag(s: &str) -> Result<f64, String> {
    let v = parse_duration_s(s)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{s}: a duration must be more than 0"))
    }
}

/// A size flag (`record --max-size`): bytes, or a number with K, M, G or T (powers of 1024;
/// `2G`, `500M`, `1.5GiB`, `300MB`), more than zero.
pub fn size_flag(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("{s}: not a size; give bytes or a number with K, M, G or T (2G, 500M)");
    let unit_at = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(unit_at);
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let mul = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches('B')
        .trim_end_matches('I')
    {
        "" => 1u64,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(bad()),
    };
    let bytes = v * mul as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{s}: a size must be more than 0"));
    }
    Ok(bytes as u64)
}

/// A duration to three significant digits in ns, µs, ms or s: "402 ns", "14.5 µs", "3.09 ms".
pub fn fmt_duration(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".into();
    }
    let (v, unit) = match ns.abs() {
        n if n < 999.5 => return format!("{ns:.0} ns"),
        n if n < 999_500.0 => (ns / 1e3, "µs"),
        n if n < 999_500_000.0 => (ns / 1e6, "ms"),
        _ => (ns / 1e9, "s"),
    };
    match v.abs() {
        a if a < 9.995 => format!("{v:.2} {unit}"),
        a if a < 99.95 => format!("{v:.1} {unit}"),
        _ => format!("{v:.0} {unit}"),
    }
}

/// A duration in ns that may be unknown ("-").
pub fn fmt_ns(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".into(), |n| fmt_duration(n as f64))
}

/// A size in B, KiB, MiB or GiB: "12.3 KiB".
pub fn fmt_bytes(b: f64) -> String {
    match b {
        b if b >= 1024.0 * 1024.0 * 1024.0 => format!("{:.1} GiB", b / (1024.0 * 1024.0 * 1024.0)),
        b if b >= 1024.0 * 1024.0 => format!("{:.2} MiB", b / (1024.0 * 1024.0)),
        b if b >= 1024.0 => format!("{:.1} KiB", b / 1024.0),
        b => format!("{b:.0} B"),
    }
}

/// A count or rate with a k/M/G suffix: "52.1k", "1.20M".
pub fn fmt_count(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// A percentage to one decimal, or "-".
pub fn fmt_pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}%"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_duration_syntax() {
        for (text, secs) in [
            ("10", 10.0),
            ("1.5", 1.5),
            ("10s", 10.0),
            ("250ms", 0.25),
            ("5m", 300.0),
            ("1h", 3600.0),
            ("1h30m", 5400.0),
            ("1h 30m", 5400.0),
            ("0", 0.0),
        ] {
            assert_eq!(parse_duration_s(text), Ok(secs), "{text}");
        }
        for bad in ["-3", "soon", "10 parsecs", "NaN", "inf", ""] {
            assert!(parse_duration_s(bad).is_err(), "{bad}");
        }
        assert_eq!(duration_flag("10s"), Ok(10.0));
        assert!(duration_flag("0").is_err() && duration_flag("0s").is_err());
    }

    #[test]
    fn durations_have_three_significant_digits() {
        assert_eq!(fmt_duration(0.0), "0 ns");
        assert_eq!(fmt_duration(402.0), "402 ns");
        assert_eq!(fmt_duration(999.0), "999 ns");
        assert_eq!(fmt_duration(1818.0), "1.82 µs");
        assert_eq!(fmt_duration(14_500.0), "14.5 µs");
        assert_eq!(fmt_duration(7_242_000.0), "7.24 ms");
        assert_eq!(fmt_duration(54_100_000.0), "54.1 ms");
        assert_eq!(fmt_duration(131_072.0), "131 µs");
        assert_eq!(fmt_duration(999_999.0), "1.00 ms");
        assert_eq!(fmt_duration(3.6e12), "3600 s");
        assert_eq!(fmt_ns(None), "-");
        assert_eq!(fmt_bytes(1344.0 * 1024.0), "1.31 MiB");
        assert_eq!(fmt_count(52_134.0), "52.1k");
        assert_eq!(fmt_pct(Some(18.81)), "18.8%");
    }
}
