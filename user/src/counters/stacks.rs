//! The per-PCIe-stack view, as `pcm-iio` shows it: inbound write and read bandwidth of each IIO
//! stack (uncore IIO box) of each socket, the NIC's stack marked, beside the socket's own total;
//! each number named by the `perf stat -M` metric that computes it, so it can be cross-checked.
//! Outbound (CPU to device MMIO) traffic is not measured: its IIO events are not in the event
//! table, which holds only encodings checked against Intel's perfmon records.

use serde::Serialize;

use super::{CounterReading, Platform};

/// IIO DATA_REQ_OF_CPU counts 4-byte units; a CHA TOR insert is one 64-byte line.
const IIO_BYTES: f64 = 4.0;
const LINE: f64 = 64.0;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackRow {
    pub socket: u32,
    /// The IIO box ("uncore_iio_3"), or "socket" for the socket's total.
    pub stack: String,
    /// Device writes to memory (DMA writes: received packets), MB/s.
    #[serde(rename = "inbound_write_mbyte_per_s")]
    pub inbound_write_mbps: Option<f64>,
    /// Device reads from memory (DMA reads: packets sent), MB/s.
    #[serde(rename = "inbound_read_mbyte_per_s")]
    pub inbound_read_mbps: Option<f64>,
    /// The stack the NIC's root bus maps to.
    pub nic: bool,
    /// The `perf stat -M` metric names of the write and read numbers (None: perf has no
    /// metric for this on the platform).
    pub perf_metrics: Option<(String, String)>,
    /// How the numbers are computed.
    pub source: String,
}

/// perf's per-socket metrics on the platform and what they are made of: SPR and later name
/// both the IIO sums (`iio_bandwidth_*`) and the CHA ones (`io_bandwidth_*`); ICX has only the
/// CHA ones; SKX/CLX compute `io_bandwidth_write` from IIO PAYLOAD_BYTES_IN, which ddioscope
/// does not count.
fn iio_metrics(p: Option<Platform>) -> Option<(String, String)> {
    matches!(p, Some(Platform::Spr | Platform::Emr | Platform::Gnr))
        .then(|| ("iio_bandwidth_write".into(), "iio_bandwidth_read".into()))
}

fn cha_metrics(p: Option<Platform>) -> Option<(String, String)> {
    matches!(
        p,
        Some(Platform::Icx | Platform::Spr | Platform::Emr | Platform::Gnr)
    )
    .then(|| ("io_bandwidth_write".into(), "io_bandwidth_read".into()))
}

/// One row per IIO box with per-box readings, and per socket a total row from the CHA (perf's
/// `io_bandwidth_*`), over readings covering `duration_s`.
pub fn stack_view(
    readings: &[CounterReading],
    duration_s: f64,
    platform: Option<Platform>,
    nic: Option<(u32, &str)>,
) -> Vec<StackRow> {
    if duration_s <= 0.0 {
        return Vec::new();
    }
    let mbps = |v: f64| v / 1e6 / duration_s;
    let mut boxes: std::collections::BTreeMap<(u32, String), (Option<f64>, Option<f64>)> =
        Default::default();
    for r in readings.iter().filter(|r| !r.is_socket_total()) {
        let Some(rest) = r.event.strip_prefix("UNC_IIO_DATA_REQ_OF_CPU.") else {
            continue;
        };
        let write = if rest.starts_with("MEM_WRITE.PART") {
            true
        } else if rest.starts_with("MEM_READ.PART") {
            false
        } else {
            continue;
        };
        let e = boxes.entry((r.socket, r.pmu.clone())).or_default();
        let slot = if write { &mut e.0 } else { &mut e.1 };
        *slot = Some(slot.unwrap_or(0.0) + r.value * IIO_BYTES);
    }
    let mut sockets: std::collections::BTreeMap<u32, (Option<f64>, Option<f64>)> =
        Default::default();
    for r in readings.iter().filter(|r| r.is_socket_total()) {
        let write = match r.event.as_str() {
            "UNC_CHA_TOR_INSERTS.IO_ITOM" | "UNC_CHA_TOR_INSERTS.IO_ITOMCACHENEAR" => true,
            "UNC_CHA_TOR_INSERTS.IO_PCIRDCUR" | "UNC_CHA_TOR_INSERTS.IO_RDCUR" => false,
            _ => continue,
        };
        let s = sockets.entry(r.socket).or_default();
        let slot = if write { &mut s.0 } else { &mut s.1 };
        *slot = Some(slot.unwrap_or(0.0) + r.value * LINE);
    }
    let mut out = Vec::new();
    let all: std::collections::BTreeSet<u32> = boxes
        .keys()
        .map(|k| k.0)
        .chain(sockets.keys().copied())
        .collect();
    for s in all {
        if let Some((w, rd)) = sockets.get(&s) {
            out.push(StackRow {
                socket: s,
                stack: "socket".into(),
                inbound_write_mbps: w.map(mbps),
                inbound_read_mbps: rd.map(mbps),
                nic: false,
                perf_metrics: cha_metrics(platform),
                source: "CHA TOR_INSERTS.IO_ITOM+IO_ITOMCACHENEAR / IO_PCIRDCUR x 64 B".into(),
            });
        }
        for ((bs, name), (w, rd)) in boxes.iter().filter(|(k, _)| k.0 == s) {
            out.push(StackRow {
                socket: *bs,
                stack: name.clone(),
                inbound_write_mbps: w.map(mbps),
                inbound_read_mbps: rd.map(mbps),
                nic: nic.is_some_and(|(ns, nb)| ns == *bs && nb == name.as_str()),
                perf_metrics: iio_metrics(platform),
                source: "IIO DATA_REQ_OF_CPU.MEM_WRITE / MEM_READ, all parts, x 4 B".into(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(socket: u32, pmu: &str, event: &str, value: f64) -> CounterReading {
        CounterReading {
            pmu: pmu.into(),
            ..crate::counters::metrics::tests::reading(socket, event, value)
        }
    }

    /// The EMR paper's 1-s socket totals as a socket row: perf's io_bandwidth_write and
    /// io_bandwidth_read from the same counts: (615,958,610 + 248) x 64 B and 653,237,920 x 64 B
    /// over 1 s (the paper's IIO-based 39,575 MB/s write is 0.4 % above the CHA-based one).
    #[test]
    fn socket_rows_are_perfs_io_bandwidth_metrics() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/iperf3_emr.json"
        );
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let rs: Vec<CounterReading> = json["cases"]["default_8096_desc"]["events"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| crate::counters::metrics::tests::reading(0, k, v.as_f64().unwrap()))
            .collect();
        let v = stack_view(&rs, 1.0, Some(Platform::Emr), None);
        assert_eq!(v.len(), 1, "{v:?}");
        let s = &v[0];
        assert_eq!(s.stack, "socket");
        // (615958610 + 248) x 64 / 1e6 and 653237920 x 64 / 1e6.
        assert_eq!(s.inbound_write_mbps.map(|x| x.round()), Some(39421.0));
        assert_eq!(s.inbound_read_mbps.map(|x| x.round()), Some(41807.0));
        assert_eq!(
            s.perf_metrics,
            Some(("io_bandwidth_write".into(), "io_bandwidth_read".into()))
        );
    }

    #[test]
    fn each_stack_gets_a_row_and_the_nics_is_marked() {
        let rs = vec![
            r(
                0,
                "uncore_iio_2",
                "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART0",
                2.5e8,
            ),
            r(
                0,
                "uncore_iio_2",
                "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART1",
                2.5e8,
            ),
            r(
                0,
                "uncore_iio_2",
                "UNC_IIO_DATA_REQ_OF_CPU.MEM_READ.PART0",
                1e8,
            ),
            r(
                0,
                "uncore_iio_0",
                "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART0",
                1e6,
            ),
            r(
                1,
                "uncore_iio_2",
                "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART0",
                3e6,
            ),
            // The socket total of the same IIO events is not a stack.
            r(0, "iio", "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART0", 2.51e8),
        ];
        let v = stack_view(&rs, 2.0, Some(Platform::Icx), Some((0, "uncore_iio_2")));
        type Row<'a> = (u32, &'a str, Option<f64>, Option<f64>, bool);
        let rows: Vec<Row> = v
            .iter()
            .map(|s| {
                (
                    s.socket,
                    s.stack.as_str(),
                    s.inbound_write_mbps,
                    s.inbound_read_mbps,
                    s.nic,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (0, "uncore_iio_0", Some(2.0), None, false),
                (0, "uncore_iio_2", Some(1000.0), Some(200.0), true),
                (1, "uncore_iio_2", Some(6.0), None, false),
            ]
        );
        // ICX has no per-stack perf metric; SPR and later call them iio_bandwidth_*.
        assert_eq!(v[0].perf_metrics, None);
        assert_eq!(
            stack_view(&rs, 2.0, Some(Platform::Spr), None)[0].perf_metrics,
            Some(("iio_bandwidth_write".into(), "iio_bandwidth_read".into()))
        );
    }
}
