//! Import of `perf stat -I MS -x, [-a --per-socket] -e ...` CSV into the same per-interval, per-socket
//! `CounterReading`s the live sampler produces, mapping perf's printed event names back to Intel names.

use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;

use super::events::{self, reference_format, Unit};
use super::platform::Platform;
use super::sysfs::ConfigWords;
use super::CounterReading;

/// Kernel uncore aliases carry a MiB scale (6.103515625e-5 = 64 B / 2^20): perf prints CAS counts in MiB.
const CAS_PER_MIB: f64 = 1_048_576.0 / 64.0;

/// `# ddioscope-platform: EMR` written by scripts/capture-counters.sh, so raw encodings resolve unambiguously.
fn platform_comment(line: &str) -> Option<Platform> {
    let rest = line.trim_start_matches('#').trim();
    Platform::from_name(rest.strip_prefix("ddioscope-platform:")?)
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A non-negative number as the count a recording stores (SQLite integers are signed
/// 64-bit), rounded; None when it is not finite, negative or 2^63 and beyond. perf prints
/// u64 counts, so a value that wrapped would otherwise be stored as a negative.
fn stored_count(v: f64) -> Option<u64> {
    // 2^63 is exact in f64; anything that rounds to it or past does not fit.
    let v = v.round();
    (0.0..9_223_372_036_854_775_808.0)
        .contains(&v)
        .then_some(v as u64)
}

fn unit_of_pmu(pmu: &str) -> Option<Unit> {
    if pmu == "cpu" || pmu == "cpu_core" {
        return Some(Unit::Core);
    }
    [Unit::Cha, Unit::Iio, Unit::Imc, Unit::Irp]
        .into_iter()
        .find(|u| {
            pmu == u.pmu_prefix()
                || pmu
                    .strip_prefix(u.pmu_prefix())
                    .and_then(|r| r.strip_prefix('_'))
                    .is_some_and(|r| r.chars().all(|c| c.is_ascii_digit()))
        })
}

/// Terms to config words with a reference format; `config=`/`config1=` terms set whole words.
fn encode_terms(p: Platform, unit: Unit, terms: &[(String, u64)]) -> Option<ConfigWords> {
    let fmt = reference_format(p, unit);
    let mut w = ConfigWords::default();
    for (k, v) in terms {
        match k.as_str() {
            "config" => w.config = *v,
            "config1" => w.config1 = *v,
            "config2" => w.config2 = *v,
            _ => fmt.set(&mut w, k, *v).ok()?,
        }
    }
    Some(w)
}

fn kernel_alias(alias: &str) -> Option<&'static str> {
    Some(match alias {
        "cas_count_read" => "UNC_M_CAS_COUNT.RD",
        "cas_count_write" => "UNC_M_CAS_COUNT.WR",
        "cas_count_read_sch0" => "UNC_M_CAS_COUNT_SCH0.RD",
        "cas_count_write_sch0" => "UNC_M_CAS_COUNT_SCH0.WR",
        "cas_count_read_sch1" => "UNC_M_CAS_COUNT_SCH1.RD",
        "cas_count_write_sch1" => "UNC_M_CAS_COUNT_SCH1.WR",
        _ => return None,
    })
}

const SOFTWARE: [&str; 9] = [
    "cpu-clock",
    "task-clock",
    "page-faults",
    "faults",
    "context-switches",
    "cs",
    "cpu-migrations",
    "minor-faults",
    "major-faults",
];

/// PERF_COUNT_SW_* ids, for `software/config=N/` spellings.
const SOFTWARE_IDS: [(&str, u64); 4] = [
    ("cpu-clock", 0),
    ("task-clock", 1),
    ("page-faults", 2),
    ("context-switches", 3),
];

/// Maps a name as perf printed it to (CounterReading::pmu, Intel event name). Unknown events keep their
/// printed name under pmu "other" rather than failing the import.
pub fn resolve_event(printed: &str, platform: Option<Platform>) -> (String, String) {
    let printed = printed.trim();
    let platforms: Vec<Platform> = match platform {
        Some(p) => std::iter::once(p)
            .chain(Platform::ALL.into_iter().filter(move |q| *q != p))
            .collect(),
        None => Platform::ALL.to_vec(),
    };
    let by_name = |name: &str| -> Option<(String, String)> {
        platforms
            .iter()
            .find_map(|p| events::find(*p, name))
            .map(|e| (e.unit.as_str().to_string(), e.name))
    };
    if let Some((pmu, rest)) = printed.split_once('/') {
        let inner = rest.rsplit_once('/').map_or(rest, |(a, _)| a);
        let unit = unit_of_pmu(pmu);
        let label = unit.map_or("other", Unit::as_str).to_string();
        if !inner.contains('=') {
            if let Some(n) = kernel_alias(inner) {
                return (label, n.to_string());
            }
            return by_name(inner).unwrap_or((label, printed.to_string()));
        }
        let mut terms = Vec::new();
        for t in inner.split(',') {
            let (k, v) = t.split_once('=').unwrap_or((t, "1"));
            if k == "name" {
                return by_name(v).unwrap_or((label, v.to_string()));
            }
            match parse_num(v) {
                Some(n) => terms.push((k.trim().to_string(), n)),
                None => return (label, printed.to_string()),
            }
        }
        if pmu == "software" {
            if let [(k, id)] = terms.as_slice() {
                if let Some(name) = SOFTWARE_IDS
                    .iter()
                    .find(|(_, i)| k == "config" && i == id)
                    .map(|(n, _)| *n)
                {
                    return ("software".into(), name.to_string());
                }
            }
        }
        if let Some(unit) = unit {
            for p in &platforms {
                let Some(words) = encode_terms(*p, unit, &terms) else {
                    continue;
                };
                let hit = events::events(*p)
                    .into_iter()
                    .filter(|e| e.unit == unit)
                    .find(|e| {
                        let ours: Vec<(String, u64)> =
                            e.fields.iter().map(|(k, v)| (k.to_string(), *v)).collect();
                        encode_terms(*p, unit, &ours) == Some(words)
                    });
                if let Some(e) = hit {
                    return (label, e.name);
                }
            }
        }
        return (label, printed.to_string());
    }
    if SOFTWARE.contains(&printed) {
        return ("software".into(), printed.to_string());
    }
    by_name(printed).unwrap_or(("other".into(), printed.to_string()))
}

/// Splits a CSV line, re-joining the event field, whose `pmu/a=1,b=2/` terms contain the separator.
fn split_fields(line: &str, event_idx: usize) -> Vec<String> {
    let raw: Vec<&str> = line.split(',').collect();
    let mut out: Vec<String> = raw.iter().take(event_idx).map(|s| s.to_string()).collect();
    let mut i = event_idx;
    if i < raw.len() {
        let mut ev = raw[i].to_string();
        i += 1;
        while ev.matches('/').count() % 2 == 1 && i < raw.len() {
            ev.push(',');
            ev.push_str(raw[i]);
            i += 1;
        }
        out.push(ev);
    }
    out.extend(raw[i.min(raw.len())..].iter().map(|s| s.to_string()));
    out
}

/// `S0`, `S1-D0` (per-die) -> socket number.
fn socket_field(s: &str) -> Option<u32> {
    let s = s.trim().strip_prefix('S')?;
    s.split('-').next()?.parse().ok()
}

/// Parses perf stat interval CSV into one Vec per interval (in time order). Without `--per-socket` all
/// sockets are merged by perf and land on socket 0.
pub fn parse_perf_stat_csv(text: &str) -> Result<Vec<Vec<CounterReading>>> {
    parse_perf_stat_csv_for(text, None)
}

type Rows = BTreeMap<(u32, String, String), CounterReading>;

pub fn parse_perf_stat_csv_for(
    text: &str,
    platform: Option<Platform>,
) -> Result<Vec<Vec<CounterReading>>> {
    let mut platform = platform;
    // (timestamp as printed, rows keyed by socket/pmu/event), in file order.
    let mut intervals: Vec<(String, Rows)> = Vec::new();
    let mut data_lines = 0;
    // Per socket, PMU and event: the capture's (raw, enabled, running) sums so far.
    let mut totals: BTreeMap<(u32, String, String), (u64, u64, u64)> = BTreeMap::new();
    let mut resolved: std::collections::HashMap<String, (String, String)> =
        std::collections::HashMap::new();
    for (lineno, line) in text.lines().enumerate() {
        let lineno = lineno + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed.starts_with('#') {
            if platform.is_none() {
                platform = platform_comment(trimmed);
                resolved.clear();
            }
            continue;
        }
        let first: Vec<&str> = trimmed.splitn(3, ',').collect();
        let time_s: f64 = first[0]
            .trim()
            .parse()
            .ok()
            .filter(|t: &f64| t.is_finite() && *t >= 0.0)
            .ok_or_else(|| anyhow!("line {lineno}: first field {:?} is not a timestamp (need `perf stat -I ... -x,` output)", first[0]))?;
        let per_socket = first.get(1).and_then(|s| socket_field(s));
        let (socket, value_idx) = match per_socket {
            Some(s) => (s, 3), // time, S0, number of CPUs/instances aggregated, value
            None => (0, 1),
        };
        let f = split_fields(trimmed, value_idx + 2);
        if f.len() < value_idx + 3 {
            bail!("line {lineno}: too few fields for perf stat CSV: {trimmed:?}");
        }
        let value_s = f[value_idx].trim();
        if value_s.starts_with('<') {
            continue; // <not counted> / <not supported>
        }
        let mut value: f64 = value_s
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .with_context(|| format!("line {lineno}: bad counter value {value_s:?}"))?;
        let unit = f[value_idx + 1].trim();
        // Resolving a name searches every platform's event table: once per name, not per line.
        let printed = &f[value_idx + 2];
        let (pmu, event) = match resolved.get(printed) {
            Some(hit) => hit.clone(),
            None => {
                let hit = resolve_event(printed, platform);
                resolved.insert(printed.clone(), hit.clone());
                hit
            }
        };
        match unit {
            "msec" => value *= 1e6, // task-clock/cpu-clock: live path reports ns
            "MiB" if event.starts_with("UNC_M_CAS_COUNT") => value *= CAS_PER_MIB,
            _ => {}
        }
        // A field perf left empty (or wrote as text) reads as absent, as before; one that is
        // a number must be one a recording can hold.
        let number = |idx: usize| f.get(idx).and_then(|s| s.trim().parse::<f64>().ok());
        let run_ns = match number(value_idx + 3) {
            None => 0,
            Some(v) => stored_count(v)
                .ok_or_else(|| anyhow!("line {lineno}: running time {v} is not a time in ns from 0 to 2^63-1, what a recording holds"))?,
        };
        let pct = match number(value_idx + 4) {
            None => 100.0,
            Some(v) if v.is_finite() && v >= 0.0 => v,
            Some(v) => bail!(
                "line {lineno}: running percentage {v} is not a finite percentage of 0 or more"
            ),
        };
        // perf already scaled the value by enabled/running; keep it and reconstruct the other fields.
        let frac = (pct / 100.0).clamp(0.0, 1.0);
        let enabled_ns = if frac > 0.0 {
            stored_count(run_ns as f64 / frac).ok_or_else(|| {
                anyhow!("line {lineno}: enabled time ({run_ns} ns running at {pct} %) is past 2^63-1 ns, what a recording holds")
            })?
        } else {
            run_ns
        };
        let raw = stored_count(value * frac).ok_or_else(|| {
            anyhow!("line {lineno}: counter value {value_s} is outside 0 to 2^63-1, what a recording holds")
        })?;
        let t_ns = stored_count(time_s * 1e9).ok_or_else(|| {
            anyhow!(
                "line {lineno}: timestamp {} s is past what a recording holds",
                first[0].trim()
            )
        })?;
        data_lines += 1;
        let key_time = first[0].trim().to_string();
        if intervals.last().is_none_or(|(t, _)| *t != key_time) {
            intervals.push((key_time, BTreeMap::new()));
        }
        let Some((_, rows)) = intervals.last_mut() else {
            continue;
        };
        // A report sums each event's counts over the whole capture in SQLite's signed 64-bit
        // integers: a capture whose sum would not fit is refused here, not stored to fail
        // every later report.
        let total = totals
            .entry((socket, pmu.clone(), event.clone()))
            .or_default();
        for (sum, add, what) in [
            (&mut total.0, raw, "counts"),
            (&mut total.1, enabled_ns, "enabled times"),
            (&mut total.2, run_ns, "running times"),
        ] {
            *sum = sum
                .checked_add(add)
                .filter(|s| *s <= i64::MAX as u64)
                .ok_or_else(|| anyhow!("line {lineno}: the {what} of {event} on socket {socket} add up to 2^63 or more: past what a recording holds"))?;
        }
        // --no-merge prints one line per box; sum them like the live path does (within
        // the capture's totals, so no overflow).
        rows.entry((socket, pmu.clone(), event.clone()))
            .and_modify(|r| {
                r.value += value;
                r.raw += raw;
            })
            .or_insert(CounterReading {
                t_ns,
                socket,
                pmu,
                event,
                value,
                raw,
                enabled_ns,
                running_ns: run_ns,
            });
    }
    if data_lines == 0 {
        bail!("no counter lines in perf stat CSV");
    }
    Ok(intervals
        .into_iter()
        .map(|(_, rows)| rows.into_values().collect())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::super::metrics::{socket_metrics, tests::reading};
    use super::*;

    fn fixture(name: &str) -> String {
        let p = format!(
            "{}/../tests/fixtures/counters/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    #[test]
    fn resolves_raw_alias_and_named_events() {
        let r = |s: &str, p| resolve_event(s, p);
        assert_eq!(
            r("uncore_cha/event=0x35,umask=0xcc43fe04/", None).1,
            "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM"
        );
        assert_eq!(
            r(
                "uncore_cha_3/event=0x35,umask=0XCC43FE04/",
                Some(Platform::Icx)
            ),
            ("cha".into(), "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM".into())
        );
        assert_eq!(
            r("uncore_cha/config=0xcc43fe00000435/", Some(Platform::Emr)).1,
            "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM"
        );
        // SKX opcode filter written as raw config1 = FILTER1 << 32.
        assert_eq!(
            r(
                "uncore_cha/event=0x35,umask=0x24,config1=0x4903300000000/",
                Some(Platform::Skx)
            )
            .1,
            "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM"
        );
        assert_eq!(r("uncore_cha/event=0x35,umask=0x14,filter_opc0=0x21e,filter_rem=1,filter_loc=1,filter_nm=1,filter_not_nm=1/", None).1, "UNC_CHA_TOR_INSERTS.IO_HIT_RDCUR");
        assert_eq!(
            r(
                "uncore_iio/event=0x83,umask=0x1,ch_mask=0x4,fc_mask=0x7/",
                None
            ),
            (
                "iio".into(),
                "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART2".into()
            )
        );
        assert_eq!(
            r("uncore_imc/cas_count_read/", None),
            ("imc".into(), "UNC_M_CAS_COUNT.RD".into())
        );
        assert_eq!(
            r("uncore_imc/event=0x06,umask=0xf0/", Some(Platform::Gnr)).1,
            "UNC_M_CAS_COUNT_SCH1.WR"
        );
        assert_eq!(
            r("unc_cha_tor_inserts.io_hit_pcirdcur", None),
            ("cha".into(), "UNC_CHA_TOR_INSERTS.IO_HIT_PCIRDCUR".into())
        );
        assert_eq!(
            r("cpu/event=0xd1,umask=0x20/", None),
            ("core".into(), "MEM_LOAD_RETIRED.L3_MISS".into())
        );
        assert_eq!(
            r(
                "uncore_cha/event=0x35,umask=0x34,name=UNC_CHA_TOR_INSERTS.IO_ITOM/",
                None
            )
            .1,
            "UNC_CHA_TOR_INSERTS.IO_ITOM"
        );
        assert_eq!(
            r("task-clock", None),
            ("software".into(), "task-clock".into())
        );
        assert_eq!(
            r("uncore_cha/event=0x99,umask=0x1/", None),
            ("cha".into(), "uncore_cha/event=0x99,umask=0x1/".into())
        );
        assert_eq!(r("weird-thing", None).0, "other");
    }

    #[test]
    fn splits_event_field_with_commas() {
        let f = split_fields(
            "1.0,S0,2,123,,uncore_cha/event=0x35,umask=0x4/,100,50.00,,",
            5,
        );
        assert_eq!(f[5], "uncore_cha/event=0x35,umask=0x4/");
        assert_eq!(f[6], "100");
        assert_eq!(f[7], "50.00");
    }

    /// The CSV holds EMR's default-case counts on socket 0 (interval 1, with multiplexing percentages) and
    /// other numbers on socket 1; imported metrics must equal those from live-path structures.
    #[test]
    fn imported_csv_gives_same_metrics_as_live_structures() {
        let intervals = parse_perf_stat_csv(&fixture("perf_stat_emr_per_socket.csv")).unwrap();
        assert_eq!(intervals.len(), 2);
        let i1 = &intervals[0];
        assert!(i1.iter().all(|r| r.t_ns == 1_001_034_231));
        assert!(i1.iter().any(|r| r.socket == 1));

        let live: Vec<CounterReading> = [
            (0, "UNC_IIO_DATA_REQ_OF_CPU.MEM_READ.PART0", 10032541573.0),
            (0, "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART0", 9893723055.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_CLFLUSH", 0.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_ITOM", 615958610.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_HIT_ITOM", 96847962.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM", 524548564.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_ITOMCACHENEAR", 248.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_HIT_ITOMCACHENEAR", 753.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_MISS_ITOMCACHENEAR", 218.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_PCIRDCUR", 653237920.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_HIT_PCIRDCUR", 127544461.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_MISS_PCIRDCUR", 576559227.0),
            (0, "UNC_CHA_TOR_INSERTS.IO_WBMTOI", 547825798.0),
            (0, "UNC_M_CAS_COUNT.RD", 728899584.0),
            (0, "UNC_M_CAS_COUNT.WR", 363732992.0),
            (1, "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART1", 250000000.0),
            (1, "UNC_CHA_TOR_INSERTS.IO_ITOM", 2000000.0),
            (1, "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM", 500000.0),
            (1, "MEM_LOAD_RETIRED.L3_MISS", 1234567.0),
        ]
        .into_iter()
        .map(|(s, e, v)| reading(s, e, v))
        .collect();

        let dur = 1.001034231;
        let a = socket_metrics(i1, dur);
        let b = socket_metrics(&live, dur);
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            let close = |p: Option<f64>, q: Option<f64>| match (p, q) {
                (Some(p), Some(q)) => (p - q).abs() <= 1e-6 * q.abs().max(1.0),
                (None, None) => true,
                _ => false,
            };
            assert!(close(x.write_miss_pct, y.write_miss_pct), "{x:?}\n{y:?}");
            assert!(close(x.read_miss_pct, y.read_miss_pct));
            assert!(close(x.partial_write_miss_pct, y.partial_write_miss_pct));
            assert!(close(x.inbound_write_mbps, y.inbound_write_mbps));
            assert!(close(x.inbound_read_mbps, y.inbound_read_mbps));
            assert!(
                close(x.dram_read_mbps, y.dram_read_mbps),
                "{:?} {:?}",
                x.dram_read_mbps,
                y.dram_read_mbps
            );
            assert!(close(x.dram_write_mbps, y.dram_write_mbps));
            assert!(close(x.l3_miss_per_s, y.l3_miss_per_s));
            assert_eq!(x.write_allocation_disabled, y.write_allocation_disabled);
            assert_eq!(x.warnings, y.warnings);
        }
        assert_eq!(a[0].write_miss_pct.map(f64::round), Some(85.0));

        // Multiplexing: perf's scaled value is kept, running% reconstructs enabled and raw.
        let r = i1
            .iter()
            .find(|r| r.event == "UNC_CHA_TOR_INSERTS.IO_HIT_PCIRDCUR")
            .unwrap();
        assert_eq!(r.value, 127544461.0);
        assert_eq!(r.running_ns, 500_517_115);
        assert_eq!(r.enabled_ns, 1_001_034_230);
        assert_eq!(r.raw, 63_772_231);
        // <not counted> lines are skipped, not zero.
        assert!(!intervals[1]
            .iter()
            .any(|r| r.event == "UNC_CHA_TOR_INSERTS.IO_WBMTOI"));
        assert!(intervals[1]
            .iter()
            .any(|r| r.pmu == "software" && r.event == "cpu-clock" && r.value == 2_004_000_000.0));
    }

    /// Output of perf 6.1 on the development host (`perf stat -a -I 500 -x, --per-socket -e cpu-clock,...`).
    #[test]
    fn parses_real_perf_software_csv() {
        let iv = parse_perf_stat_csv(&fixture("perf_stat_software_host.csv")).unwrap();
        assert_eq!(iv.len(), 3);
        let clk = iv[0].iter().find(|r| r.event == "cpu-clock").unwrap();
        assert_eq!(
            (clk.pmu.as_str(), clk.socket, clk.t_ns),
            ("software", 0, 500_544_660)
        );
        assert!((clk.value - 1_006_990_000.0).abs() < 1.0, "{clk:?}");
        assert_eq!(
            (clk.running_ns, clk.enabled_ns),
            (1_006_994_135, 1_006_994_135)
        );
        let cs = iv[1]
            .iter()
            .find(|r| r.event == "context-switches")
            .unwrap();
        assert_eq!(cs.value, 11964.0);
        assert_eq!(
            resolve_event("software/config=0/", None),
            ("software".into(), "cpu-clock".into())
        );
    }

    #[test]
    fn rejects_non_interval_output() {
        let e = parse_perf_stat_csv("abc,1,,cycles\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a timestamp"), "{e}");
        assert!(parse_perf_stat_csv("# only comments\n").is_err());
    }

    /// Found by fuzzing: huge values summed over --no-merge lines overflowed `raw`, and
    /// non-finite numbers were taken as timestamps and counts.
    #[test]
    fn damaged_numbers_are_refused() {
        let line = "1.0,S1,7,8888888888888888888888888881,,cycles,1000,100,,\n";
        let e = parse_perf_stat_csv(&line.repeat(3))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "line 1: counter value 8888888888888888888888888881 is outside 0 to 2^63-1"
            ),
            "{e}"
        );
        for bad in ["inf,1,,cycles\n", "-1.0,1,,cycles\n", "NaN,1,,cycles\n"] {
            assert!(
                parse_perf_stat_csv(bad)
                    .unwrap_err()
                    .to_string()
                    .contains("not a timestamp"),
                "{bad}"
            );
        }
        assert!(parse_perf_stat_csv("1.0,inf,,cycles\n")
            .unwrap_err()
            .to_string()
            .contains("bad counter value"));
    }

    /// perf prints u64 counts: one at 2^63 or past, a time that is not finite or a sum
    /// over the capture past 2^63 - 1 would be stored wrapped and fail every later report.
    #[test]
    fn counts_and_times_a_recording_cannot_hold_are_refused_with_their_line() {
        let ok = "1.0,S0,2,9223372036854774784,,cycles,1000,100.00,,\n";
        assert_eq!(
            parse_perf_stat_csv(ok).unwrap()[0][0].raw,
            9_223_372_036_854_774_784
        );
        let cases = [
            ("1.0,S0,2,9223372036854775807,,cycles,1000,100.00,,\n", "line 1: counter value 9223372036854775807 is outside"),
            ("1.0,S0,2,18446744073709551615,,cycles,1000,100.00,,\n", "line 1: counter value 18446744073709551615"),
            ("1.0,S0,2,-5,,cycles,1000,100.00,,\n", "line 1: counter value -5"),
            ("1.0,S0,2,5,,cycles,inf,100.00,,\n", "line 1: running time inf"),
            ("1.0,S0,2,5,,cycles,1e400,100.00,,\n", "line 1: running time inf"),
            ("1.0,S0,2,5,,cycles,nan,100.00,,\n", "line 1: running time NaN"),
            ("1.0,S0,2,5,,cycles,1000,nan,,\n", "line 1: running percentage NaN"),
            ("1.0,S0,2,5,,cycles,1000,-inf,,\n", "line 1: running percentage -inf"),
            ("1.0,S0,2,5,,cycles,9e18,1.00,,\n", "line 1: enabled time"),
            ("1e300,S0,2,5,,cycles,1000,100.00,,\n", "line 1: timestamp 1e300 s"),
            (
                "1.0,S0,2,5000000000000000000,,cycles,1000,100.00,,\n2.0,S0,2,5000000000000000000,,cycles,1000,100.00,,\n",
                "line 2: the counts of cycles on socket 0 add up to 2^63 or more",
            ),
        ];
        for (csv, want) in cases {
            let e = parse_perf_stat_csv(csv).unwrap_err().to_string();
            assert!(e.starts_with(want), "{csv}: {e}");
        }
        // The same sums on two sockets are two totals, each within range.
        let two = "1.0,S0,2,5000000000000000000,,cycles,1000,100.00,,\n1.0,S1,2,5000000000000000000,,cycles,1000,100.00,,\n";
        assert_eq!(parse_perf_stat_csv(two).unwrap()[0].len(), 2);
    }
}
