//! The recording's run metadata: one typed struct, written and read here only.
//!
//! It is stored in the `meta` table as one row per field, under the field's name: text as it
//! is, numbers and flags in their JSON spelling, structures as JSON (so `sqlite3` and older
//! readers see what they always saw). Reading is lenient: a key that is missing, unknown or
//! does not parse reads as None, and the reader of that field says what None means.
use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Deserializer, Serialize};

use super::Writer;
use crate::build_info;
use crate::counters::{CounterSource, Detection};
use crate::model::geometry::LlcGeometry;
use crate::session::MissSampling;
use crate::topology::{HostInfo, IfaceInfo};

/// What `format` says of every recording.
pub const FORMAT: &str = "ddioscope-recording";

/// Why a recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoppedBy {
    Signal,
    Duration,
    /// The interface was deleted.
    DeviceRemoved,
    /// The interface was moved to another network namespace.
    DeviceMoved,
    /// The interface's network namespace was deleted (or deleted and made anew).
    NetnsDeleted,
    /// The file system filled: the recording holds the intervals before.
    DiskFull,
    /// `record --rotate` closed this file; the next file holds the intervals after.
    Rotated,
}

impl StoppedBy {
    /// How a report says it.
    pub fn describe(self) -> &'static str {
        match self {
            StoppedBy::Signal => "stopped by a signal",
            StoppedBy::Duration => "ran its duration",
            StoppedBy::DeviceRemoved => "stopped: the interface was removed",
            StoppedBy::DeviceMoved => {
                "stopped: the interface was moved to another network namespace"
            }
            StoppedBy::NetnsDeleted => "stopped: the interface's network namespace was deleted",
            StoppedBy::DiskFull => "stopped: the disk filled; the intervals before are complete",
            StoppedBy::Rotated => "closed by --rotate; the next file continues the run",
        }
    }
}

/// Every key a recording's `meta` table holds. All optional: a recording cut off early, or
/// written by an older ddioscope, lacks some.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RecordingMeta {
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub ddioscope_version: Option<String>,
    /// The commit the recorder was built from ("unknown" outside a git checkout).
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
    /// The build id of the BPF objects the recorder embeds: two recordings with the same
    /// id ran the same programs.
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub bpf_build_id: Option<String>,
    /// The command line that made the recording.
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iface: Option<IfaceInfo>,
    /// The probe feature table at record time (`probe::features::Features`), as recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<serde_json::Value>,
    /// The kernel's skb drop reasons by number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drop_reason_names: Option<BTreeMap<u32, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_every: Option<u32>,
    /// Stage latencies measured on 1 in this many packets (None: before `--stage-sample`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage_every: Option<u32>,
    /// True once the recorder finished cleanly (None or false: cut off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub complete: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostInfo>,
    /// LLC from sysfs and IIO LLC WAYS from MSR 0xC8B, as the model will use them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geometry: Option<LlcGeometry>,
    /// Each tracepoint and the flavour it attached as (`probe::HookStatus`), as recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooks: Option<serde_json::Value>,
    /// How much detail ran beyond tier 0's exact counts (None: before tiers; all of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<crate::session::DetailMode>,
    /// Where tier 0's RX counts came from (tcx, the hand-up tracepoints, or the driver's
    /// qstats).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_counts: Option<crate::probe::qcount::RxSource>,
    /// Where tier 0's TX counts came from: "xmit" (the net_dev_start_xmit program) or
    /// "qstats" (the driver's own per-queue counters).
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub tx_counts: Option<String>,
    /// Tier 0's hooks and how each attached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier0_hooks: Option<Vec<crate::probe::qcount::Tier0Hook>>,
    /// Every packet hook at the end of the recording: whose packets it sees (the device's, or
    /// every device's on the host) and when it ran (None: recordings from before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_plan: Option<Vec<crate::probe::HookPlan>>,
    /// Flows sample an skb of d bytes with probability min(1, d / this) (1: exact; None:
    /// before sampled flows, exact).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_sample_bytes: Option<u32>,
    /// Inside the detail windows, the flows of a direction sampled there alone take an skb of d
    /// bytes with probability min(1, d / this) (None: before this was recorded, every skb).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_window_sample_bytes: Option<u32>,
    /// Flows of the driver-counted directions were sampled in this many detail windows and
    /// scaled by the driver's per-queue counts (None: flows were sampled all the time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_windows: Option<u64>,
    /// Detail windows opened between the drawn ones, each for a queue that carried traffic
    /// with a stage untimed yet (None: before such windows, or no windows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows_opened: Option<u64>,
    /// "windows": NAPI polls were counted in the detail windows and estimated from them;
    /// "exact" (or None, in older recordings): counted at every poll.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub napi_counts: Option<String>,
    /// "windows": drops were counted by kfree_skb in the detail windows and estimated from
    /// them; "exact" (or None, in older recordings): counted at every drop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drop_counts: Option<String>,
    /// The detail windows (`--detail windows`; None: the detail hooks ran all the time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_cycle_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_duty: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<f64>,
    /// Packets each window was sized to see on a busy device, cutting it below `window_ms`
    /// (0: windows of `window_ms`; None: recorded before windows were sized by packets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_packets: Option<u64>,
    /// The programs' runs per packet of the device the windows were held to (0: none; None:
    /// recorded before the budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_run_budget: Option<f64>,
    /// Drawn windows let pass to hold that budget (None: no windows, no budget, or recorded
    /// before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows_passed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_warmup_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_drain_ms: Option<f64>,
    /// The counter platform in words, e.g. "SPR (Sapphire Rapids), …" or "unsupported: …".
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// The counter platform as detected. None in recordings from before it was stored:
    /// `platform_detection()` reads their `platform` line instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform_detection: Option<Detection>,
    /// Where the counter readings come from (None: absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters_source: Option<CounterSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters_notes: Option<Vec<String>>,
    /// The perf-stat CSV the counters were imported from.
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub counters_imported_from: Option<String>,
    /// What drives the L3-miss samples, or why there are none, in words.
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub miss_sampling: Option<String>,
    /// What drives the L3-miss samples. None in recordings from before it was stored:
    /// `miss_source()` reads their `miss_sampling` line instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_source: Option<MissSampling>,
    /// The samples come from a software stand-in, not L3-miss events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_stand_in: Option<bool>,
    /// The period the sampler ran at (inside windows: the one asked for over the duty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_period: Option<u64>,
    /// Address join on 1 in N buffer pages (None: every page).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_sample: Option<u64>,
    /// Attribution windows (`--miss-duty` > 1 with a sampler; None: always on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_cycle_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_duty: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_window_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_warmup_ms: Option<f64>,
    /// Which packet buffers the address join maps, in words.
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub buffer_join: Option<String>,
    /// Why the sampler's throttling was not measured.
    #[serde(deserialize_with = "text", skip_serializing_if = "Option::is_none")]
    pub miss_throttle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_sampler_cpus: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buf_pages_capacity: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prog_ids: Option<Vec<u32>>,
    /// CLOCK_MONOTONIC at the first interval's start and at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_unix_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<StoppedBy>,
}

/// A text field that older files may hold as something that parses as a number or a flag.
fn text<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<String>, D::Error> {
    Ok(match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s),
        Some(v) => Some(v.to_string()),
    })
}

/// A stored value as JSON: structures, numbers and flags parse; anything else is text.
fn stored_value(raw: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(v) if !v.is_string() => v,
        _ => serde_json::Value::String(raw.to_string()),
    }
}

impl RecordingMeta {
    /// The fields that say what wrote the recording: its format, and this binary's
    /// version, commit and BPF build id (as `ddioscope --version` names them).
    pub fn this_build() -> RecordingMeta {
        RecordingMeta {
            format: Some(FORMAT.into()),
            ddioscope_version: Some(build_info::VERSION.into()),
            git_commit: Some(build_info::GIT_COMMIT.into()),
            bpf_build_id: Some(build_info::BPF_BUILD_ID.into()),
            ..Default::default()
        }
    }

    /// The `meta` table's rows, typed. A row that does not parse as its field's type (a
    /// damaged or foreign value) is left out, and its field reads as None.
    pub fn from_rows(rows: &BTreeMap<String, String>) -> RecordingMeta {
        let mut fields = serde_json::Map::new();
        for (k, raw) in rows {
            let v = stored_value(raw);
            let one = serde_json::Value::Object([(k.clone(), v.clone())].into_iter().collect());
            if serde_json::from_value::<RecordingMeta>(one).is_ok() {
                fields.insert(k.clone(), v);
            }
        }
        serde_json::from_value(serde_json::Value::Object(fields)).unwrap_or_default()
    }

    /// The rows for the fields that are set: text as it is, everything else as JSON.
    pub fn to_rows(&self) -> Result<Vec<(String, String)>> {
        let serde_json::Value::Object(fields) = serde_json::to_value(self)? else {
            anyhow::bail!("recording metadata did not serialize to an object");
        };
        Ok(fields
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                v => (k, v.to_string()),
            })
            .collect())
    }

    /// Store the fields that are set, replacing what the file held for them; the others
    /// are left as they are (so a later write adds to an earlier one).
    pub fn write(&self, w: &Writer) -> Result<()> {
        for (k, v) in self.to_rows()? {
            w.set_meta(&k, &v)?;
        }
        Ok(())
    }

    pub fn complete(&self) -> bool {
        self.complete == Some(true)
    }

    /// What drove the L3-miss samples. Recordings from before `miss_source` was stored
    /// fall back to the label they stored, which began with a fixed phrase per source.
    pub fn miss_source(&self) -> Option<MissSampling> {
        self.miss_source
            .or_else(|| self.miss_sampling.as_deref().and_then(legacy_miss_source))
    }

    /// Whether the samples come from a software stand-in (stored, else from the source).
    pub fn miss_stand_in(&self) -> bool {
        self.miss_stand_in
            .unwrap_or_else(|| self.miss_source().is_some_and(MissSampling::is_stand_in))
    }

    /// The counter platform as detected. Recordings from before `platform_detection` was
    /// stored fall back to their `platform` line: "unsupported: REASON" was the only
    /// unsupported form; a supported platform's CPU identity is not recoverable (None).
    pub fn platform_detection(&self) -> Option<Detection> {
        self.platform_detection.clone().or_else(|| {
            let reason = self.platform.as_deref()?.strip_prefix("unsupported: ")?;
            Some(Detection::Unsupported {
                reason: reason.to_string(),
                cpu: None,
            })
        })
    }
}

/// The source behind a `miss_sampling` label as ddioscope 0.1.0 wrote them
/// (`probe::l3miss::event_attr` and the session's off/absent lines).
fn legacy_miss_source(label: &str) -> Option<MissSampling> {
    const PREFIXES: [(&str, MissSampling); 6] = [
        ("MEM_LOAD_RETIRED.L3_MISS (PEBS)", MissSampling::Pebs),
        (
            "software cpu-clock taking the address of the buffer being copied",
            MissSampling::SoftwareCopy,
        ),
        ("software cpu-clock (stand-in", MissSampling::SoftwareClock),
        (
            "software page-faults (stand-in",
            MissSampling::SoftwareFaults,
        ),
        ("off", MissSampling::Off),
        ("absent", MissSampling::Absent),
    ];
    PREFIXES
        .iter()
        .find(|(p, _)| label.starts_with(p))
        .map(|&(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn rows_round_trip_in_their_stored_spelling() {
        let m = RecordingMeta {
            command: Some("ddioscope record -i eth1".into()),
            interval_ms: Some(100),
            complete: Some(false),
            counters_source: Some(CounterSource::Live),
            counters_notes: Some(vec!["a note".into()]),
            miss_source: Some(MissSampling::SoftwareCopy),
            miss_stand_in: Some(true),
            miss_window_ms: Some(62.5),
            stopped_by: Some(StoppedBy::Signal),
            ..RecordingMeta::this_build()
        };
        let stored: BTreeMap<String, String> = m.to_rows().unwrap().into_iter().collect();
        // As sqlite3 and the older readers see them: text bare, the rest JSON.
        assert_eq!(stored["format"], "ddioscope-recording");
        assert_eq!(stored["ddioscope_version"], build_info::VERSION);
        assert_eq!(stored["git_commit"], build_info::GIT_COMMIT);
        assert_eq!(stored["bpf_build_id"], build_info::BPF_BUILD_ID);
        assert_eq!(stored["interval_ms"], "100");
        assert_eq!(stored["complete"], "false");
        assert_eq!(stored["counters_source"], "live");
        assert_eq!(stored["counters_notes"], r#"["a note"]"#);
        assert_eq!(stored["miss_source"], "software-copy");
        assert_eq!(stored["stopped_by"], "signal");
        assert!(!stored.contains_key("host"), "unset fields are not written");
        let again: BTreeMap<String, String> = RecordingMeta::from_rows(&stored)
            .to_rows()
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(again, stored);
    }

    /// Missing, unknown and damaged keys read as None, and the others still read.
    #[test]
    fn lenient_reading() {
        let m = RecordingMeta::from_rows(&rows(&[
            ("interval_ms", "two hundred"),
            ("host", "{not json"),
            ("counters_source", "teleported"),
            ("some_future_key", "1"),
            ("command", "12"),
            ("sample_every", "64"),
            ("miss_window_ms", "62.500"),
            ("miss_cycle_ms", "1000"),
        ]));
        assert_eq!(
            (m.interval_ms, m.host.is_none(), m.counters_source),
            (None, true, None)
        );
        assert_eq!(
            (m.command.as_deref(), m.sample_every),
            (Some("12"), Some(64))
        );
        assert_eq!(
            (m.miss_window_ms, m.miss_cycle_ms),
            (Some(62.5), Some(1000.0))
        );
    }

    /// Recordings from before the typed keys: the labels they stored still say what sampled.
    #[test]
    fn older_recordings_read_their_labels() {
        use crate::probe::l3miss::{event_attr, MissSource};
        let sys = std::path::Path::new("/nonexistent");
        for (src, want) in [
            (MissSource::SoftwareClock, MissSampling::SoftwareClock),
            (MissSource::SoftwareCopy, MissSampling::SoftwareCopy),
            (MissSource::SoftwareFaults, MissSampling::SoftwareFaults),
        ] {
            let label = event_attr(src, None, 50_000, sys)
                .ok()
                .flatten()
                .map(|(_, l)| l)
                .unwrap_or_default();
            let m = RecordingMeta {
                miss_sampling: Some(label.clone()),
                ..Default::default()
            };
            assert_eq!(m.miss_source(), Some(want), "{label}");
            assert!(m.miss_stand_in(), "{label}");
        }
        for (label, want) in [
            ("MEM_LOAD_RETIRED.L3_MISS (PEBS), 1 in 2000 on 96 CPUs", MissSampling::Pebs),
            ("absent: no PEBS L3-miss event on this host (no Intel core PMU); attribution is model/regression-only", MissSampling::Absent),
            ("off (--miss-sampling off)", MissSampling::Off),
        ] {
            let m = RecordingMeta { miss_sampling: Some(label.into()), ..Default::default() };
            assert_eq!(m.miss_source(), Some(want), "{label}");
            assert!(!m.miss_stand_in(), "{label}");
        }
        // A stored source wins over the label.
        let m = RecordingMeta {
            miss_sampling: Some("software cpu-clock (stand-in, no addresses)".into()),
            miss_source: Some(MissSampling::Pebs),
            ..Default::default()
        };
        assert!(!m.miss_stand_in());

        let old = RecordingMeta {
            platform: Some("unsupported: AMD EPYC: no DDIO uncore events".into()),
            ..Default::default()
        };
        assert_eq!(
            old.platform_detection(),
            Some(Detection::Unsupported {
                reason: "AMD EPYC: no DDIO uncore events".into(),
                cpu: None
            })
        );
        let supported = RecordingMeta {
            platform: Some("SPR (Sapphire Rapids)".into()),
            ..Default::default()
        };
        assert_eq!(supported.platform_detection(), None);
    }

    /// The checked-in fixture, written before the typed keys, reads whole.
    #[test]
    fn fixture_recording_meta() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/recordings/veth-tcp.ddio");
        let rec = super::super::Recording::open(&path).expect("fixture opens");
        let m = &rec.meta;
        assert_eq!(m.format.as_deref(), Some(FORMAT));
        assert_eq!(
            (m.interval_ms, m.sample_every, m.complete()),
            (Some(200), Some(256), true)
        );
        assert!(m.iface.is_some() && m.host.is_some() && m.geometry.is_some());
        assert_eq!(
            (m.counters_source, m.stopped_by),
            (Some(CounterSource::Absent), Some(StoppedBy::Duration))
        );
        assert_eq!(
            (m.miss_source(), m.miss_stand_in()),
            (Some(MissSampling::Absent), false)
        );
        assert!(matches!(
            m.platform_detection(),
            Some(Detection::Unsupported { .. })
        ));
        // Written before recordings named their build.
        assert_eq!(
            (m.git_commit.as_deref(), m.bpf_build_id.as_deref()),
            (None, None)
        );
    }
}
