//! Counter self-checks: counters that measure the same inbound DMA independently must agree
//! interval by interval (IIO write bytes of the NIC's stack, CHA DDIO write lines × 64, the
//! NIC's RX bytes from tier 0; IMC write bandwidth at least the DDIO write misses × 64). When
//! they do not, the counters are not to be trusted, and the way they disagree says why: a
//! multiplexed event, readings of the wrong socket, a stack that is not the NIC's, or a wrong
//! event encoding.

use serde::Serialize;

use super::CounterReading;

/// IIO DATA_REQ_OF_CPU counts 4-byte units.
const IIO_BYTES: f64 = 4.0;
/// A CHA TOR insert and a CAS are one 64-byte line.
const LINE: f64 = 64.0;
/// IIO write bytes and CHA ItoM(+ItoMCacheNear) lines × 64 agree within this fraction (the
/// Intel DDIO PerfMon paper's EMR iperf3 tables: 0.4 % apart).
pub const IIO_CHA_TOLERANCE: f64 = 0.10;
/// The NIC's stack writes at least this share of the RX frame bytes tier 0 counted ...
pub const RX_LOW: f64 = 0.90;
/// ... and at most this multiple of them plus `RX_PER_PACKET` bytes a packet (completion
/// entries, descriptor write-backs, partial lines).
pub const RX_HIGH: f64 = 1.25;
pub const RX_PER_PACKET: f64 = 128.0;
/// DRAM write bytes reach at least this share of DDIO write misses × 64 (each miss evicts a
/// line that is written back; a few may be written back in the next interval).
pub const IMC_LOW: f64 = 0.90;
/// Below this many lines on either side a check is not made: too few to judge.
pub const MIN_LINES: f64 = 1000.0;
/// An event counted for less than this share of its enabled time was multiplexed.
pub const MIN_RUNNING: f64 = 0.99;
/// Counters are untrusted once a check fails in more than this share of the intervals it was
/// made in (a single interval can fail at the edge of a burst: reads a moment apart).
pub const UNTRUSTED_SHARE: f64 = 0.10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// IIO inbound write bytes of the NIC's socket vs CHA DDIO write lines × 64.
    IioVsCha,
    /// IIO inbound write bytes of the NIC's stack vs the NIC's RX bytes from tier 0.
    IioVsNicRx,
    /// IMC write bytes ≥ DDIO write misses × 64.
    ImcVsMisses,
}

impl Check {
    pub fn describe(self) -> &'static str {
        match self {
            Check::IioVsCha => "IIO inbound write bytes vs CHA DDIO write lines x 64",
            Check::IioVsNicRx => "IIO inbound write bytes of the NIC's stack vs the NIC's RX bytes",
            Check::ImcVsMisses => "IMC write bytes >= DDIO write misses x 64",
        }
    }
}

/// Why a check failed, as far as the readings tell.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum Cause {
    /// An event of the check was counted part of the time only: its scaled value is a guess.
    Multiplexing { event: String, running_pct: f64 },
    /// The NIC's traffic shows on another socket's counters.
    WrongSocket { socket: u32 },
    /// The NIC's traffic shows on another IIO stack of its socket.
    NotNicStack { stack: String },
    /// The readings are full-time and on the right socket and stack, yet one event disagrees
    /// with two others that agree: its encoding counts something else.
    WrongEncoding { event: String },
    /// Nothing in the readings singles out a cause.
    Unexplained,
}

impl Cause {
    pub fn describe(&self) -> String {
        match self {
            Cause::Multiplexing { event, running_pct } => format!(
                "multiplexing: {event} counted {running_pct:.0}% of the time, its scaled value is an estimate"
            ),
            Cause::WrongSocket { socket } => {
                format!("wrong socket: the NIC's traffic shows on socket {socket}'s counters")
            }
            Cause::NotNicStack { stack } => format!(
                "not the NIC's stack: the NIC's traffic shows on {stack}, not on the stack its root bus maps to"
            ),
            Cause::WrongEncoding { event } => format!(
                "wrong event encoding: {event} disagrees with two counters that agree, at full counting time"
            ),
            Cause::Unexplained => "no single cause found in the readings".into(),
        }
    }
}

/// One check in one interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub check: Check,
    pub passed: bool,
    /// The two sides compared, in bytes.
    pub measured: f64,
    pub expected: f64,
    pub cause: Option<Cause>,
}

/// Where the NIC is, as the recording's topology says.
#[derive(Debug, Clone, Copy)]
pub struct Nic<'a> {
    pub socket: u32,
    /// The IIO box its root bus maps to (e.g. "uncore_iio_3"); None: not known.
    pub iio_box: Option<&'a str>,
}

/// The NIC's RX in an interval from tier 0: frame bytes and packets.
#[derive(Debug, Clone, Copy)]
pub struct NicRx {
    pub bytes: f64,
    pub packets: f64,
}

fn is_iio_write(event: &str) -> bool {
    event.starts_with("UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART")
}

/// IIO inbound write bytes: the socket's total rows, or one box's rows.
fn iio_write(rs: &[CounterReading], socket: u32, stack: Option<&str>) -> Option<f64> {
    let v: Vec<f64> = rs
        .iter()
        .filter(|r| r.socket == socket && is_iio_write(&r.event))
        .filter(|r| match stack {
            None => r.is_socket_total(),
            Some(b) => r.pmu == b,
        })
        .map(|r| r.value * IIO_BYTES)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

/// Each IIO box's inbound write bytes on a socket.
fn iio_boxes(rs: &[CounterReading], socket: u32) -> Vec<(String, f64)> {
    let mut m: std::collections::BTreeMap<String, f64> = Default::default();
    for r in rs
        .iter()
        .filter(|r| r.socket == socket && !r.is_socket_total() && is_iio_write(&r.event))
    {
        *m.entry(r.pmu.clone()).or_default() += r.value * IIO_BYTES;
    }
    m.into_iter().collect()
}

fn total(rs: &[CounterReading], socket: u32, names: &[&str]) -> Option<f64> {
    let v: Vec<f64> = rs
        .iter()
        .filter(|r| r.socket == socket && r.is_socket_total() && names.contains(&r.event.as_str()))
        .map(|r| r.value)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

const CHA_WRITES: &[&str] = &[
    "UNC_CHA_TOR_INSERTS.IO_ITOM",
    "UNC_CHA_TOR_INSERTS.IO_ITOMCACHENEAR",
];
const CHA_WRITE_MISSES: &[&str] = &[
    "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM",
    "UNC_CHA_TOR_INSERTS.IO_MISS_ITOMCACHENEAR",
];
const IMC_WRITES: &[&str] = &[
    "UNC_M_CAS_COUNT.WR",
    "UNC_M_CAS_COUNT_SCH0.WR",
    "UNC_M_CAS_COUNT_SCH1.WR",
];

/// The least share of its enabled time an event of the check counted on `socket`, and which.
fn least_running(
    rs: &[CounterReading],
    socket: u32,
    pred: &dyn Fn(&CounterReading) -> bool,
) -> Option<(String, f64)> {
    rs.iter()
        .filter(|r| r.socket == socket && pred(r) && r.enabled_ns > 0)
        .map(|r| (r.event.clone(), r.running_ns as f64 / r.enabled_ns as f64))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .filter(|(_, f)| *f < MIN_RUNNING)
}

fn muxed(ev: Option<(String, f64)>) -> Option<Cause> {
    ev.map(|(event, f)| Cause::Multiplexing {
        event,
        running_pct: 100.0 * f,
    })
}

fn agree(a: f64, b: f64, tol: f64) -> bool {
    b > 0.0 && ((a - b) / b).abs() <= tol
}

fn rx_fits(written: f64, rx: NicRx) -> bool {
    written >= RX_LOW * rx.bytes && written <= RX_HIGH * rx.bytes + RX_PER_PACKET * rx.packets
}

/// The checks that can be made on one interval's readings (every socket's totals, and the
/// per-box IIO rows where recorded); a check whose sides are missing or too small is left out.
pub fn check_interval(rs: &[CounterReading], nic: Nic, rx: Option<NicRx>) -> Vec<Outcome> {
    let mut out = Vec::new();
    let s = nic.socket;
    let sockets: std::collections::BTreeSet<u32> = rs.iter().map(|r| r.socket).collect();
    let others = || sockets.iter().copied().filter(move |o| *o != s);
    let iio_sock = iio_write(rs, s, None);
    let cha = total(rs, s, CHA_WRITES).map(|v| v * LINE);
    let iio_nic = nic.iio_box.and_then(|b| iio_write(rs, s, Some(b)));
    let rx = rx.filter(|r| r.bytes >= MIN_LINES * LINE);
    let rx_ok = match (iio_nic, rx) {
        (Some(w), Some(r)) => Some(rx_fits(w, r)),
        _ => None,
    };
    let big = |v: f64| v >= MIN_LINES * LINE;

    // 1. IIO vs CHA on the NIC's socket: both count every inbound write of the socket.
    if let (Some(i), Some(c)) = (iio_sock, cha) {
        if big(i) || big(c) {
            let passed = agree(i, c, IIO_CHA_TOLERANCE);
            let cause = (!passed).then(|| {
                muxed(least_running(rs, s, &|r| {
                    (is_iio_write(&r.event) && r.is_socket_total())
                        || CHA_WRITES.contains(&r.event.as_str())
                }))
                .or_else(|| {
                    // The NIC's RX bytes side with one of the two: the other is miscounting.
                    let r = rx?;
                    let fits = |v: f64| rx_fits(v, r);
                    match (fits(iio_nic.unwrap_or(i)), fits(c)) {
                        (true, false) => Some(Cause::WrongEncoding {
                            event: "UNC_CHA_TOR_INSERTS.IO_ITOM".into(),
                        }),
                        (false, true) => Some(Cause::WrongEncoding {
                            event: "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE".into(),
                        }),
                        _ => None,
                    }
                })
                .unwrap_or(Cause::Unexplained)
            });
            out.push(Outcome {
                check: Check::IioVsCha,
                passed,
                measured: i,
                expected: c,
                cause,
            });
        }
    }

    // 2. The NIC's stack vs its RX bytes.
    if let (Some(w), Some(r), Some(ok)) = (iio_nic, rx, rx_ok) {
        let cause = (!ok).then(|| {
            muxed(least_running(rs, s, &|r| {
                is_iio_write(&r.event) && Some(r.pmu.as_str()) == nic.iio_box
            }))
            .or_else(|| {
                // The traffic on another socket: its IIO total or its CHA writes fit the RX.
                others()
                    .find(|o| {
                        iio_write(rs, *o, None).is_some_and(|v| rx_fits(v, r))
                            || total(rs, *o, CHA_WRITES).is_some_and(|v| rx_fits(v * LINE, r))
                    })
                    .map(|socket| Cause::WrongSocket { socket })
            })
            .or_else(|| {
                iio_boxes(rs, s)
                    .into_iter()
                    .find(|(b, v)| Some(b.as_str()) != nic.iio_box && rx_fits(*v, r))
                    .map(|(stack, _)| Cause::NotNicStack { stack })
            })
            .or_else(|| {
                // The socket's CHA writes fit the RX while the stack's IIO count does not.
                cha.filter(|c| rx_fits(*c, r))
                    .map(|_| Cause::WrongEncoding {
                        event: "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE".into(),
                    })
            })
            .unwrap_or(Cause::Unexplained)
        });
        out.push(Outcome {
            check: Check::IioVsNicRx,
            passed: ok,
            measured: w,
            expected: r.bytes,
            cause,
        });
    } else if let (None, Some(r)) = (iio_sock.or(cha), rx) {
        // No DDIO counts on the NIC's socket at all while the NIC received: are they on another?
        if let Some(socket) = others().find(|o| {
            iio_write(rs, *o, None).is_some_and(|v| rx_fits(v, r))
                || total(rs, *o, CHA_WRITES).is_some_and(|v| rx_fits(v * LINE, r))
        }) {
            out.push(Outcome {
                check: Check::IioVsNicRx,
                passed: false,
                measured: 0.0,
                expected: r.bytes,
                cause: Some(Cause::WrongSocket { socket }),
            });
        }
    }

    // 3. DRAM writes cover the write misses' evictions.
    let misses = total(rs, s, CHA_WRITE_MISSES).map(|v| v * LINE);
    let imc = total(rs, s, IMC_WRITES).map(|v| v * LINE);
    if let (Some(m), Some(w)) = (misses, imc) {
        if big(m) {
            let passed = w >= IMC_LOW * m;
            let cause = (!passed).then(|| {
                muxed(least_running(rs, s, &|r| {
                    IMC_WRITES.contains(&r.event.as_str())
                        || CHA_WRITE_MISSES.contains(&r.event.as_str())
                }))
                .unwrap_or_else(|| {
                    // The misses' total (ItoM) agrees with IIO: the CAS event is the odd one.
                    let cha_ok = out.iter().any(|o| o.check == Check::IioVsCha && o.passed);
                    if cha_ok {
                        Cause::WrongEncoding {
                            event: "UNC_M_CAS_COUNT.WR".into(),
                        }
                    } else {
                        Cause::Unexplained
                    }
                })
            });
            out.push(Outcome {
                check: Check::ImcVsMisses,
                passed,
                measured: w,
                expected: m,
                cause,
            });
        }
    }
    out
}

/// One check over a recording: how often it was made and failed, the causes found, the
/// worst disagreement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckSummary {
    pub check: Check,
    pub description: &'static str,
    pub intervals: u64,
    pub failed: u64,
    /// The first interval group it failed in.
    pub first_failed: Option<u64>,
    /// Each cause found, with the number of intervals it explained.
    pub causes: Vec<(Cause, u64)>,
    /// measured / expected, the farthest from 1 seen.
    pub worst_ratio: Option<f64>,
}

/// All checks over a recording, accumulated interval by interval (memory: one entry per
/// check and cause).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SelfChecks {
    pub checks: Vec<CheckSummary>,
}

impl SelfChecks {
    pub fn add(&mut self, interval: u64, outcomes: &[Outcome]) {
        for o in outcomes {
            let s = match self.checks.iter_mut().position(|c| c.check == o.check) {
                Some(i) => &mut self.checks[i],
                None => {
                    self.checks.push(CheckSummary {
                        check: o.check,
                        description: o.check.describe(),
                        intervals: 0,
                        failed: 0,
                        first_failed: None,
                        causes: Vec::new(),
                        worst_ratio: None,
                    });
                    self.checks.sort_by_key(|c| c.check);
                    let i = self
                        .checks
                        .iter()
                        .position(|c| c.check == o.check)
                        .unwrap_or(0);
                    &mut self.checks[i]
                }
            };
            s.intervals += 1;
            if o.expected > 0.0 {
                let r = o.measured / o.expected;
                let far = |x: f64| (x.max(1e-12)).ln().abs();
                if s.worst_ratio.is_none_or(|w| far(r) > far(w)) {
                    s.worst_ratio = Some(r);
                }
            }
            if !o.passed {
                s.failed += 1;
                s.first_failed.get_or_insert(interval);
                if let Some(c) = &o.cause {
                    match s.causes.iter_mut().find(|(k, _)| *k == *c) {
                        Some((_, n)) => *n += 1,
                        None => s.causes.push((c.clone(), 1)),
                    }
                }
            }
        }
    }

    /// The checks that failed often enough to distrust the counters.
    pub fn failed(&self) -> Vec<&CheckSummary> {
        self.checks
            .iter()
            .filter(|c| c.failed > 0 && c.failed as f64 > UNTRUSTED_SHARE * c.intervals as f64)
            .collect()
    }

    pub fn trusted(&self) -> bool {
        self.failed().is_empty()
    }

    /// One line per failed check: which, how often, and why.
    pub fn lines(&self) -> Vec<String> {
        self.failed()
            .iter()
            .map(|c| {
                let mut causes = c.causes.clone();
                causes.sort_by_key(|c| std::cmp::Reverse(c.1));
                format!(
                    "counters untrusted: {} failed in {} of {} intervals (worst ratio {}): {}",
                    c.description,
                    c.failed,
                    c.intervals,
                    c.worst_ratio.map_or("-".into(), |r| format!("{r:.2}")),
                    if causes.is_empty() {
                        Cause::Unexplained.describe()
                    } else {
                        causes
                            .iter()
                            .map(|(k, n)| format!("{} ({n})", k.describe()))
                            .collect::<Vec<_>>()
                            .join("; ")
                    }
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One interval of a fixture case: its readings and the NIC's RX.
    type Interval = (Vec<CounterReading>, Option<NicRx>);

    /// The fixture's intervals.
    fn case(name: &str) -> (Nic<'static>, Vec<Interval>) {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/selfcheck.json"
        );
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let c = &json["cases"][name];
        let nic = Nic {
            socket: c["nic"]["socket"].as_u64().unwrap() as u32,
            iio_box: c["nic"]["iio_box"]
                .as_str()
                .map(|s| &*Box::leak(s.to_string().into_boxed_str())),
        };
        let intervals = c["intervals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|iv| {
                let rs = iv["readings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| {
                        let value = r["value"].as_f64().unwrap();
                        let running = r
                            .get("running_pct")
                            .and_then(|v| v.as_f64())
                            .unwrap_or(100.0);
                        CounterReading {
                            t_ns: 0,
                            socket: r["socket"].as_u64().unwrap() as u32,
                            pmu: r["pmu"].as_str().unwrap().into(),
                            event: r["event"].as_str().unwrap().into(),
                            value,
                            raw: (value * running / 100.0) as u64,
                            enabled_ns: 100_000_000,
                            running_ns: (1e6 * running) as u64,
                        }
                    })
                    .collect();
                let rx = iv.get("nic_rx").map(|x| NicRx {
                    bytes: x["bytes"].as_f64().unwrap(),
                    packets: x["packets"].as_f64().unwrap(),
                });
                (rs, rx)
            })
            .collect();
        (nic, intervals)
    }

    fn run(name: &str) -> SelfChecks {
        let (nic, ivs) = case(name);
        let mut s = SelfChecks::default();
        for (i, (rs, rx)) in ivs.iter().enumerate() {
            s.add(i as u64, &check_interval(rs, nic, *rx));
        }
        s
    }

    fn causes(s: &SelfChecks, check: Check) -> Vec<Cause> {
        s.checks
            .iter()
            .filter(|c| c.check == check)
            .flat_map(|c| c.causes.iter().map(|(k, _)| k.clone()))
            .collect()
    }

    #[test]
    fn consistent_counters_pass_every_check() {
        let s = run("consistent");
        assert_eq!(s.checks.len(), 3, "{s:?}");
        assert!(
            s.checks.iter().all(|c| c.intervals == 3 && c.failed == 0),
            "{s:?}"
        );
        assert!(s.trusted() && s.lines().is_empty());
    }

    #[test]
    fn a_wrong_cha_encoding_is_named() {
        let s = run("wrong_cha_encoding");
        assert!(!s.trusted());
        assert_eq!(
            causes(&s, Check::IioVsCha),
            vec![Cause::WrongEncoding {
                event: "UNC_CHA_TOR_INSERTS.IO_ITOM".into()
            }]
        );
        // The NIC's stack still agrees with its RX bytes.
        assert!(s
            .checks
            .iter()
            .any(|c| c.check == Check::IioVsNicRx && c.failed == 0));
        let l = s.lines();
        assert!(
            l[0].starts_with("counters untrusted: IIO inbound write bytes vs CHA DDIO write lines x 64 failed in 3 of 3 intervals")
                && l[0].contains("wrong event encoding: UNC_CHA_TOR_INSERTS.IO_ITOM"),
            "{l:?}"
        );
    }

    #[test]
    fn a_nic_on_the_other_socket_is_found_there() {
        let s = run("nic_on_other_socket");
        assert!(!s.trusted());
        assert_eq!(
            causes(&s, Check::IioVsNicRx),
            vec![Cause::WrongSocket { socket: 1 }]
        );
    }

    #[test]
    fn another_stack_carrying_the_nics_traffic_is_named() {
        let s = run("not_the_nics_stack");
        assert_eq!(
            causes(&s, Check::IioVsNicRx),
            vec![Cause::NotNicStack {
                stack: "uncore_iio_5".into()
            }]
        );
    }

    #[test]
    fn multiplexing_is_blamed_before_encodings() {
        let s = run("multiplexed");
        assert_eq!(
            causes(&s, Check::IioVsCha),
            vec![Cause::Multiplexing {
                event: "UNC_CHA_TOR_INSERTS.IO_ITOM".into(),
                running_pct: 25.0
            }]
        );
    }

    #[test]
    fn dram_writes_below_the_misses_blame_the_cas_encoding() {
        let s = run("wrong_imc_encoding");
        assert_eq!(
            causes(&s, Check::ImcVsMisses),
            vec![Cause::WrongEncoding {
                event: "UNC_M_CAS_COUNT.WR".into()
            }]
        );
        assert!(s
            .checks
            .iter()
            .any(|c| c.check == Check::IioVsCha && c.failed == 0));
    }

    /// The EMR iperf3 tables (one socket's 1-s totals): IIO write bytes and ItoM lines × 64
    /// agree to 0.4 %, well inside the bound.
    #[test]
    fn the_published_emr_tables_pass_iio_vs_cha() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/iperf3_emr.json"
        );
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for case in ["default_8096_desc", "reduced_2048_desc"] {
            let rs: Vec<CounterReading> = json["cases"][case]["events"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| super::super::metrics::tests::reading(0, k, v.as_f64().unwrap()))
                .collect();
            let o = check_interval(
                &rs,
                Nic {
                    socket: 0,
                    iio_box: None,
                },
                None,
            );
            assert_eq!(o.len(), 1, "{case}: {o:?}");
            assert!(o[0].passed, "{case}: {o:?}");
            assert!(
                (o[0].measured / o[0].expected - 1.0).abs() < 0.005,
                "{case}: {o:?}"
            );
        }
    }
}
