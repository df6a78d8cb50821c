//! Hardware-counter view: platform detection, the uncore/core event table, sysfs PMU discovery, the live
//! perf sampler (uncore or software events), `perf stat` CSV import, the DDIO metrics computed from any
//! of them, and the self-checks that tell whether they can be trusted.

pub mod events;
pub mod import;
pub mod live;
pub mod metrics;
pub mod platform;
pub mod selfcheck;
pub mod stacks;
pub mod sysfs;

use serde::Serialize;
use std::path::Path;

pub use events::{EventDef, EventSet, Unit};
pub use live::{OpenFailure, OpenReport, Sampler, SamplerConfig, SamplerMode};
pub use metrics::{socket_metrics, SocketMetrics};
pub use platform::{Detection, Platform};

/// One event's scaled delta over one interval on one socket (all boxes / CPUs of that socket summed).
/// Maps 1:1 onto the `counters` SQLite table.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct CounterReading {
    /// CLOCK_MONOTONIC ns at the end of the interval (imported data: seconds since capture start, in ns).
    pub t_ns: u64,
    pub socket: u32,
    /// "cha", "iio", "imc", "core", "software"; per-stack IIO rows use the box name, e.g. "uncore_iio_3".
    pub pmu: String,
    /// Intel event name (software events: perf's name, e.g. "cpu-clock").
    pub event: String,
    /// Delta scaled for multiplexing: raw * enabled / running.
    pub value: f64,
    /// Unscaled delta.
    pub raw: u64,
    /// Mean over the summed boxes/CPUs, so running/enabled is the fraction of time counted.
    pub enabled_ns: u64,
    pub running_ns: u64,
}

impl CounterReading {
    /// True for per-socket totals; false for per-box detail rows (which must not be added again).
    pub fn is_socket_total(&self) -> bool {
        !self.pmu.starts_with("uncore_")
    }
}

/// Where a recording's counter readings come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterSource {
    Live,
    Software,
    Imported,
    Absent,
}

impl CounterSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CounterSource::Live => "live",
            CounterSource::Software => "software",
            CounterSource::Imported => "imported",
            CounterSource::Absent => "absent",
        }
    }
}

impl std::fmt::Display for CounterSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Which hardware view a live session takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountersMode {
    /// Uncore/core PMUs when the platform has them; otherwise none, quietly.
    Auto,
    /// Software perf events through the same read path (hosts without a PMU; tests).
    Software,
    /// No counters.
    Off,
}

/// Open the counter sampler asked for: the sampler, where its readings come from, and
/// notes. Auto degrades quietly (the reason is kept in the notes); an explicit request
/// fails loudly.
pub fn open(mode: CountersMode) -> anyhow::Result<(Option<Sampler>, CounterSource, Vec<String>)> {
    let detection = platform::detect_host();
    Ok(match mode {
        CountersMode::Off => (
            None,
            CounterSource::Absent,
            vec!["counters disabled (--counters off)".into()],
        ),
        CountersMode::Software => {
            let (s, rep) = Sampler::try_open(&SamplerConfig::software());
            if s.is_none() {
                anyhow::bail!("--counters software: {}", rep.failure_lines().join("; "));
            }
            (s, CounterSource::Software, rep.failure_lines())
        }
        CountersMode::Auto => match detection.platform() {
            Some(p) => {
                let (s, rep) = Sampler::try_open(&SamplerConfig::hardware(p));
                let src = if s.is_some() {
                    CounterSource::Live
                } else {
                    CounterSource::Absent
                };
                (s, src, rep.failure_lines())
            }
            None => (
                None,
                CounterSource::Absent,
                vec![format!("no uncore DDIO counters: {}", detection.describe())],
            ),
        },
    })
}

/// What `ddioscope doctor` prints about counters.
#[derive(Clone, Debug, Serialize)]
pub struct DoctorReport {
    pub platform: String,
    pub supported: bool,
    pub opened: usize,
    pub failed: usize,
    pub lines: Vec<String>,
}

/// Lists which counter events would open on this host and why the others would not. With `try_open` it
/// really opens (and closes) them, so kernel refusals (permissions, EINVAL) show up too.
pub fn doctor(sysfs_root: &Path, detection: &Detection, try_open: bool) -> DoctorReport {
    let mut lines = vec![format!("platform: {}", detection.describe())];
    let Some(platform) = detection.platform() else {
        return DoctorReport {
            platform: detection.describe(),
            supported: false,
            opened: 0,
            failed: 0,
            lines,
        };
    };
    let cfg = SamplerConfig {
        mode: SamplerMode::Hardware(platform),
        sysfs_root: sysfs_root.to_path_buf(),
        event_set: EventSet::Full,
        per_box_iio: false,
    };
    let report = if try_open {
        live::Sampler::try_open(&cfg).1
    } else {
        live::plan_report(&cfg)
    };
    for o in &report.opened {
        let verb = if try_open { "opened" } else { "would open" };
        lines.push(format!(
            "{verb}: {} {} on {} instance(s)",
            o.pmu, o.event, o.instances
        ));
    }
    lines.extend(report.failure_lines());
    DoctorReport {
        platform: platform.to_string(),
        supported: true,
        opened: report.opened.len(),
        failed: report.failed.len(),
        lines,
    }
}

/// The `-e` arguments for `perf stat` on a platform. With an inventory, events whose format fields the
/// running kernel lacks are left out (perf would reject the whole command otherwise).
pub fn perf_stat_events(
    platform: Platform,
    set: EventSet,
    inventory: Option<&sysfs::Inventory>,
) -> Vec<String> {
    events::event_set(platform, set)
        .into_iter()
        .filter(|e| match inventory {
            None => true,
            Some(inv) => inv
                .boxes(e.unit)
                .first()
                .is_some_and(|p| p.format.encode(&e.terms()).is_ok()),
        })
        .map(|e| e.perf_term_string())
        .collect()
}

/// The full capture command `scripts/capture-counters.sh` prints, for `ddioscope counters-command`.
pub fn perf_stat_command(
    platform: Platform,
    set: EventSet,
    inventory: Option<&sysfs::Inventory>,
) -> String {
    let evs = perf_stat_events(platform, set, inventory);
    format!(
        "perf stat -a -I 1000 -x, --per-socket -e '{}'",
        evs.join(",")
    )
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Expected config words derived from Intel's perfmon records, shared by the events and sysfs tests.
    use super::events::{EventDef, Origin, Unit};
    use super::platform::Platform;
    use super::sysfs::ConfigWords;
    use std::collections::HashMap;

    pub fn perfmon_records(p: Platform) -> HashMap<String, serde_json::Value> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/perfmon_ddio_events.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let plat = &json["platforms"][p.as_str()];
        let mut out = HashMap::new();
        for section in ["uncore", "core"] {
            for rec in plat[section].as_array().unwrap() {
                out.insert(rec["EventName"].as_str().unwrap().to_string(), rec.clone());
            }
        }
        out
    }

    fn hex(v: &serde_json::Value) -> u64 {
        let s = v.as_str().unwrap_or("0");
        let s = s.trim_start_matches("0x").trim_start_matches("0X");
        u64::from_str_radix(if s.is_empty() { "0" } else { s }, 16).unwrap()
    }

    /// config = EventCode | UMask<<8 | unit extras, per shared/perfmon/README.md.
    pub fn expected_from_record(p: Platform, unit: Unit, rec: &serde_json::Value) -> ConfigWords {
        let base = hex(&rec["EventCode"]) | hex(&rec["UMask"]) << 8;
        let ext = hex(&rec["UMaskExt"]);
        let skx = p.uses_cha_opcode_filter();
        let mut w = ConfigWords {
            config: base,
            ..Default::default()
        };
        match unit {
            Unit::Cha if skx => {
                if rec["Filter"].as_str() == Some("Filter1") {
                    w.config1 = hex(&rec["FILTER_VALUE"]) << 32;
                }
            }
            Unit::Cha => w.config |= ext << 32,
            Unit::Iio => {
                w.config |=
                    hex(&rec["PortMask"]) << 36 | hex(&rec["FCMask"]) << if skx { 44 } else { 48 };
                if p == Platform::Gnr && ext != 0 {
                    assert_eq!(
                        ext,
                        w.config >> 32,
                        "GNR UMaskExt must equal config[63:32] of the ch/fc encoding"
                    );
                }
            }
            _ => assert_eq!(ext, 0, "unexpected UMaskExt on {:?}", rec["EventName"]),
        }
        w
    }

    /// README-stated values for SKX/CLX CHA encodings perfmon lacks or leaves with FILTER1 = 0.
    fn readme_expected(p: Platform, e: &EventDef) -> Option<ConfigWords> {
        if !p.uses_cha_opcode_filter() || e.unit != Unit::Cha {
            return None;
        }
        let (ev, rest) = e.name.strip_prefix("UNC_CHA_TOR_")?.split_once(".IO")?;
        let code = if ev == "INSERTS" { 0x35 } else { 0x36 };
        let (umask, op) = match rest {
            "" => (0x34, ""),
            "_HIT" => (0x14, ""),
            "_MISS" => (0x24, ""),
            r => match r.strip_prefix("_HIT_") {
                Some(op) => (0x14, op),
                None => match r.strip_prefix("_MISS_") {
                    Some(op) => (0x24, op),
                    None => (0x34, r.strip_prefix('_')?),
                },
            },
        };
        let filter1 = match op {
            "" => 0x3B, // rem|loc|all_op|nm|not_nm; inferred (README), not hardware-tested
            "ITOM" => 0x49033,
            "RDCUR" => 0x43C33,
            "RFO" => 0x40033,
            _ => return None,
        };
        Some(ConfigWords {
            config: code | umask << 8,
            config1: filter1 << 32,
            ..Default::default()
        })
    }

    pub fn expected_for(
        p: Platform,
        e: &EventDef,
        records: &HashMap<String, serde_json::Value>,
    ) -> ConfigWords {
        let readme = readme_expected(p, e);
        match (records.get(&e.name), readme) {
            (Some(rec), Some(r)) => {
                let from_rec = expected_from_record(p, e.unit, rec);
                assert_eq!(
                    from_rec.config, r.config,
                    "{p} {}: event/umask must match Intel's record",
                    e.name
                );
                if e.origin == Origin::Perfmon {
                    assert_eq!(from_rec, r, "{p} {}: README and record disagree", e.name);
                }
                r
            }
            (Some(rec), None) => expected_from_record(p, e.unit, rec),
            (None, Some(r)) => r,
            (None, None) => panic!("{p} {}: neither an Intel record nor a README value", e.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_names() {
        assert_eq!(CounterSource::Imported.as_str(), "imported");
        assert_eq!(
            serde_json::to_string(&CounterSource::Absent).unwrap(),
            "\"absent\""
        );
    }

    #[test]
    fn capture_script_matches_event_table() {
        // The script is self-contained (it must run where ddioscope cannot); this keeps it in step.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/capture-counters.sh"
        );
        let script = std::fs::read_to_string(path).unwrap();
        for p in Platform::ALL {
            let begin = format!("# BEGIN EVENTS {p}\n");
            let start = script
                .find(&begin)
                .unwrap_or_else(|| panic!("no events block for {p}"))
                + begin.len();
            let len = script[start..].find(&format!("# END EVENTS {p}")).unwrap();
            let got: Vec<&str> = script[start..start + len]
                .lines()
                .map(|l| l.trim().trim_end_matches('\\').trim())
                .filter(|l| !l.is_empty())
                .collect();
            let want = perf_stat_events(p, EventSet::Essential, None);
            assert_eq!(
                got, want,
                "scripts/capture-counters.sh block for {p} is out of date"
            );
        }
    }

    #[test]
    fn doctor_on_fixture_and_on_unsupported() {
        let root = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/sysfs/icx"
        ));
        let cpuinfo = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/cpuinfo/icx.txt"
        ))
        .unwrap();
        let d = doctor(root, &platform::detect(&cpuinfo), false);
        assert!(d.supported && d.opened > 0, "{:#?}", d.lines);
        assert!(
            d.lines
                .iter()
                .any(|l| l.contains("UNC_CHA_TOR_INSERTS.IO_MISS_ITOM")),
            "{:#?}",
            d.lines
        );

        let empty = tempfile::tempdir().unwrap();
        let d = doctor(empty.path(), &platform::detect(&cpuinfo), false);
        assert_eq!(d.opened, 0);
        assert!(
            d.lines
                .iter()
                .any(|l| l == "uncore_cha: no such PMU on this host (VM or non-Intel)"),
            "{:#?}",
            d.lines
        );

        let amd = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/cpuinfo/amd_epyc.txt"
        ))
        .unwrap();
        let d = doctor(root, &platform::detect(&amd), false);
        assert!(!d.supported && d.lines[0].contains("AMD EPYC: no DDIO uncore events"));
    }

    #[test]
    fn perf_stat_command_skips_fields_the_kernel_lacks() {
        let root = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/sysfs/icx"
        ));
        let inv = sysfs::discover(root).unwrap();
        // SKX events need filter_opc0, which the ICX kernel format does not have.
        assert!(
            perf_stat_events(Platform::Skx, EventSet::Essential, Some(&inv))
                .iter()
                .all(|e| !e.contains("filter_opc0"))
        );
        let cmd = perf_stat_command(Platform::Icx, EventSet::Essential, Some(&inv));
        assert!(
            cmd.starts_with("perf stat -a -I 1000 -x, --per-socket -e 'uncore_cha/event=0x35,"),
            "{cmd}"
        );
    }
}
