//! Validation of the model against published measurements (tests/fixtures/model): every row replayed through the same `--synthetic` spec string `ddioscope simulate` takes, MAE per experiment, trends, leave-one-out calibration, and the ResQ footprints.

use super::calibrate::{calibrate, CalibrationParams, Measured};
use super::geometry::LlcGeometry;
use super::spec::{simulate, SimSpec};

fn fixture(name: &str) -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/model/");
    std::fs::read_to_string(format!("{p}{name}")).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// One published measurement: a configuration of the Gold 6140 testbed and its socket hit
/// rates.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub exp: String,
    pub pkt: u32,
    pub desc: u32,
    pub queues: u32,
    pub ways: u32,
    /// Offered load (the generator's TX rate), Gb/s.
    pub offered_gbps: f64,
    pub itom_hit: f64,
    pub rd_hit: Option<f64>,
}

/// The generator offered 99.3-99.5 Gb/s in every row of the single-queue experiments (its
/// TXRATE, ddio-bench pktsize-desc and ddio-tune sample results); the `gbps` column of
/// ddio_bench_skx6140.csv is what came back.
const SINGLE_QUEUE_OFFERED_GBPS: f64 = 99.4;

fn csv_rows(name: &str) -> Vec<Vec<String>> {
    fixture(name)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("experiment") && !l.trim().is_empty())
        .map(|l| l.split(',').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// Rows of a fixture; `itom` and `rd` are the columns of the write and read hit rates,
/// `offered` that of the offered rate (None: [`SINGLE_QUEUE_OFFERED_GBPS`]).
fn rows_of(name: &str, offered: Option<usize>, itom: usize, rd: Option<usize>) -> Vec<Row> {
    csv_rows(name)
        .into_iter()
        .map(|c| Row {
            exp: c[0].clone(),
            pkt: c[1].parse().unwrap(),
            desc: c[2].parse().unwrap(),
            queues: c[3].parse().unwrap(),
            ways: c[4].parse().unwrap(),
            offered_gbps: offered.map_or(SINGLE_QUEUE_OFFERED_GBPS, |i| c[i].parse().unwrap()),
            itom_hit: c[itom].parse().unwrap(),
            rd_hit: rd.and_then(|i| c[i].parse().ok()),
        })
        .collect()
}

/// Every published row: ddio_bench_skx6140.csv (experiment,pkt_bytes,rx_desc_per_queue,
/// queues,ddio_ways,itom_hit_pct,p99_us,gbps), then the multi-core files (experiment,
/// pkt_bytes,rx_desc_per_queue,queues,ddio_ways,offered_gbps,itom_hit_pct,itom_hit_sd,
/// pcierdcur_hit_pct,rx_mpps,lat50_us).
pub(crate) fn all_rows() -> Vec<Row> {
    let mut v = rows_of("ddio_bench_skx6140.csv", None, 5, None);
    for f in [
        "ddio_bench_cores_skx6140.csv",
        "ddio_bench_cores_vs_ways_skx6140.csv",
        "ddio_bench_pkt_rate_skx6140.csv",
    ] {
        v.extend(rows_of(f, Some(5), 6, Some(8)));
    }
    v
}

/// The row as `ddioscope simulate --synthetic` takes it (the interface the published
/// multi-core rows are checked through).
pub(crate) fn spec_of(r: &Row) -> SimSpec {
    let text = format!(
        "preset=skx6140,queues={},ring={},pkt_bytes={},rate_gbps={},ddio_ways={},consumer=forward",
        r.queues, r.desc, r.pkt, r.offered_gbps, r.ways
    );
    SimSpec::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Simulated (write hit %, I/O read hit %) per row, simulating each distinct spec once.
fn predict_all(rows: &[Row], tweak: &dyn Fn(&mut SimSpec)) -> Vec<(f64, f64)> {
    let mut memo: Vec<(String, (f64, f64))> = Vec::new();
    rows.iter()
        .map(|r| {
            let mut s = spec_of(r);
            tweak(&mut s);
            let key = s.cache_key();
            if let Some((_, p)) = memo.iter().find(|(k, _)| *k == key) {
                return *p;
            }
            let res = simulate(&s);
            let p = (
                res.total.io_write_hit_pct().unwrap_or(0.0),
                res.total.io_read_hit_pct().unwrap_or(0.0),
            );
            memo.push((key, p));
            p
        })
        .collect()
}

fn mae(pairs: impl Iterator<Item = (f64, f64)>) -> (f64, usize) {
    let (mut s, mut n) = (0.0, 0usize);
    for (a, b) in pairs {
        s += (a - b).abs();
        n += 1;
    }
    (s / n.max(1) as f64, n)
}

/// Experiments in the order they are reported.
const EXPERIMENTS: [&str; 5] = [
    "pktsize_desc",
    "ddio_ways",
    "cores",
    "cores_vs_ways",
    "pkt_rate",
];

/// Print the per-row table and return the write-hit MAE per experiment and overall.
fn report(rows: &[Row], pred: &[(f64, f64)]) -> Vec<(String, f64, usize)> {
    println!(
        "{:<14} {:>5} {:>5} {:>3} {:>4} {:>6} | {:>7} {:>7} {:>6} | {:>6} {:>6}",
        "experiment",
        "pkt",
        "desc",
        "q",
        "ways",
        "Gb/s",
        "w meas",
        "w model",
        "err",
        "r meas",
        "r mod"
    );
    for (r, p) in rows.iter().zip(pred) {
        println!(
            "{:<14} {:>5} {:>5} {:>3} {:>4} {:>6.1} | {:>7.2} {:>7.2} {:>+6.2} | {:>6} {:>6.1}",
            r.exp,
            r.pkt,
            r.desc,
            r.queues,
            r.ways,
            r.offered_gbps,
            r.itom_hit,
            p.0,
            p.0 - r.itom_hit,
            r.rd_hit
                .map(|x| format!("{x:.1}"))
                .unwrap_or_else(|| "-".into()),
            p.1
        );
    }
    let mut out = Vec::new();
    for e in EXPERIMENTS {
        let (m, n) = mae(rows
            .iter()
            .zip(pred)
            .filter(|(r, _)| r.exp == e)
            .map(|(r, p)| (r.itom_hit, p.0)));
        println!("MAE {e:<14} {m:6.2} pp over {n:2} rows");
        out.push((e.to_string(), m, n));
    }
    let (m, n) = mae(rows.iter().zip(pred).map(|(r, p)| (r.itom_hit, p.0)));
    println!("MAE {:<14} {m:6.2} pp over {n:2} rows", "all");
    out.push(("all".into(), m, n));
    out
}

fn is_non_increasing(v: &[f64], tol: f64) -> bool {
    v.windows(2).all(|w| w[1] <= w[0] + tol)
}

/// Sampling noise of the simulator near 100% hit is a few hundredths of a point; trends are
/// judged with this tolerance (the measured table itself has 0.3 pp repeat noise: the
/// 1024 B x 4096 row reads 63.06 and 63.40 in its two experiments).
const TREND_TOL: f64 = 0.15;

/// The claimed MAE per experiment (docs/model.md, README) and the margin each bound adds:
/// the simulator is deterministic for a given seed, so the margin covers only changes in
/// floating-point summation order across builds (0.1 pp), not sampling.
const CLAIMED_MAE: [(&str, f64); 6] = [
    ("pktsize_desc", 2.56),
    ("ddio_ways", 0.56),
    ("cores", 4.67),
    ("cores_vs_ways", 7.30),
    ("pkt_rate", 5.99),
    ("all", 3.99),
];
const MAE_MARGIN: f64 = 0.1;

/// Every published row, one model, one parameter set: the MAE per experiment, the
/// trends, and each bound = the claim + [`MAE_MARGIN`].
#[test]
fn ddio_bench_skx6140_all_experiments() {
    let rows = all_rows();
    let pred = predict_all(&rows, &|_| {});
    let maes = report(&rows, &pred);
    for (e, claim) in CLAIMED_MAE {
        let m = maes.iter().find(|(n, _, _)| n == e).map(|x| x.1).unwrap();
        assert!(
            m <= claim + MAE_MARGIN,
            "{e}: MAE {m:.2} > claimed {claim} + {MAE_MARGIN}"
        );
    }

    // Trends on the single-queue grid (one spec per point, so reuse the memo by row).
    let hit = |pkt: u32, desc: u32, ways: u32| -> f64 {
        let i = rows.iter().position(|r| {
            r.exp != "cores" && r.queues == 1 && r.pkt == pkt && r.desc == desc && r.ways == ways
        });
        match i {
            Some(i) => pred[i].0,
            None => simulate(&spec_of(&Row {
                exp: String::new(),
                pkt,
                desc,
                queues: 1,
                ways,
                offered_gbps: SINGLE_QUEUE_OFFERED_GBPS,
                itom_hit: 0.0,
                rd_hit: None,
            }))
            .total
            .io_write_hit_pct()
            .unwrap_or(0.0),
        }
    };
    let descs = [128, 256, 512, 1024, 2048, 4096];
    let pkts = [256, 512, 1024, 1500];
    let mut table = Vec::new();
    for &p in &pkts {
        let v: Vec<f64> = descs.iter().map(|&d| hit(p, d, 2)).collect();
        println!(
            "trend pkt {p:>4}: hit vs desc {:?}",
            v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>()
        );
        assert!(
            is_non_increasing(&v, TREND_TOL),
            "hit must fall as descriptors grow at {p} B: {v:?}"
        );
        assert!(v[5] < v[0] - 1.0, "{p}: no visible fall {v:?}");
        table.push(v);
    }
    for (j, d) in descs.iter().enumerate() {
        let v: Vec<f64> = table.iter().map(|row| row[j]).collect();
        println!(
            "trend desc {d:>4}: hit vs pkt {:?}",
            v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>()
        );
        assert!(
            is_non_increasing(&v, TREND_TOL),
            "hit must fall as packets grow at {d} desc: {v:?}"
        );
    }
    let w: Vec<f64> = (2..=11).map(|w| hit(1024, 4096, w)).collect();
    println!(
        "trend 1024 B x 4096: hit vs ways {:?}",
        w.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>()
    );
    assert!(
        w.windows(2).all(|x| x[1] >= x[0] - TREND_TOL),
        "hit must rise with ways: {w:?}"
    );
    assert!(w[2] - w[0] > 20.0);

    // Across queue counts: from 4 cores on (unsaturated, 256 descriptors each) the hit
    // rate falls as cores are added; at 4096 descriptors in total it rises with ways for
    // every split.
    let cores: Vec<f64> = rows
        .iter()
        .zip(&pred)
        .filter(|(r, _)| r.exp == "cores" && r.queues >= 4)
        .map(|(_, p)| p.0)
        .collect();
    println!(
        "trend cores 4..18 x 256: {:?}",
        cores.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>()
    );
    assert!(
        is_non_increasing(&cores, TREND_TOL) && cores[0] - cores[cores.len() - 1] > 30.0,
        "{cores:?}"
    );
    for q in [1, 2, 4] {
        let v: Vec<f64> = rows
            .iter()
            .zip(&pred)
            .filter(|(r, _)| r.exp == "cores_vs_ways" && r.queues == q)
            .map(|(_, p)| p.0)
            .collect();
        assert!(
            v.windows(2).all(|x| x[1] >= x[0] - TREND_TOL),
            "{q} queues: hit must rise with ways {v:?}"
        );
    }
}

/// Leave-one-out calibration on each testbed experiment: calibrate on one configuration
/// from the host's counters (write and read hit), predict the other rows of that experiment
/// with the calibrated parameters, report the MAE. Calibration rows are spread over each
/// experiment (first, middle, last) to keep the test's simulations bounded.
#[test]
fn calibration_leave_one_out() {
    let rows = all_rows();
    let mut total = (0.0, 0usize);
    let mut total_raw = (0.0, 0usize);
    for e in ["pktsize_desc", "cores", "cores_vs_ways", "pkt_rate"] {
        let ex: Vec<Row> = rows.iter().filter(|r| r.exp == e).cloned().collect();
        let picks = [0, ex.len() / 2, ex.len() - 1];
        let mut err = (0.0, 0usize);
        let mut uncal = (0.0, 0usize);
        for &i in &picks {
            let m = Measured {
                io_write_hit_pct: Some(ex[i].itom_hit),
                io_read_hit_pct: ex[i].rd_hit,
                ..Default::default()
            };
            let mut s = spec_of(&ex[i]);
            s.max_packets = LOO_PACKETS;
            let c = calibrate(&s, &m);
            let others: Vec<Row> = ex
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, r)| r.clone())
                .collect();
            let p: CalibrationParams = c.params;
            let cal = predict_all(&others, &|s| {
                p.apply(s);
                s.max_packets = LOO_PACKETS;
            });
            let raw = predict_all(&others, &|s| s.max_packets = LOO_PACKETS);
            for ((r, a), b) in others.iter().zip(&cal).zip(&raw) {
                err.0 += (a.0 - r.itom_hit).abs();
                err.1 += 1;
                uncal.0 += (b.0 - r.itom_hit).abs();
                uncal.1 += 1;
            }
            println!(
                "{e:<14} calibrated on {:>4} desc x {:>2} q, {} ways: evenness {:.2}, bg {:.2e}/s, tx delay {:.1} us; residual {:+.2} pp ({} simulations)",
                ex[i].desc, ex[i].queues, ex[i].ways, p.hash_evenness, p.bg_lines_per_sec, p.tx_delay_us, c.residual_write_pct.unwrap_or(f64::NAN), c.simulations
            );
        }
        let m = err.0 / err.1 as f64;
        let u = uncal.0 / uncal.1 as f64;
        println!(
            "LOO {e:<14} MAE {m:6.2} pp calibrated vs {u:6.2} pp uncalibrated over {} predictions",
            err.1
        );
        total.0 += err.0;
        total.1 += err.1;
        total_raw.0 += uncal.0;
        total_raw.1 += uncal.1;
    }
    let all = total.0 / total.1 as f64;
    let raw = total_raw.0 / total_raw.1 as f64;
    println!("LOO all            MAE {all:6.2} pp calibrated vs {raw:6.2} pp uncalibrated over {} predictions", total.1);
    assert!(
        all <= CLAIMED_LOO_MAE + MAE_MARGIN,
        "leave-one-out MAE {all:.2} > claimed {CLAIMED_LOO_MAE} + {MAE_MARGIN}"
    );
}

/// The leave-one-out MAE docs/model.md states.
const CLAIMED_LOO_MAE: f64 = 6.18;
/// Packets per simulation in the leave-one-out test (a fifth of the default, to bound the
/// test's run time; the hit rates move by a few tenths of a point).
const LOO_PACKETS: u64 = 300_000;

#[test]
fn resq_footprints_and_verdicts() {
    use super::analytic::{ring_footprint_bytes, verdict_for, Verdict, DESC_BYTES_PER_PKT};
    let v: serde_json::Value = serde_json::from_str(&fixture("resq_nsdi18.json")).expect("json");
    let g = LlcGeometry::bdw_e5_2695v4();
    let mut verdicts = Vec::new();
    let mut hits = Vec::new();
    for case in ["pkt_64B", "pkt_1518B"] {
        let c = &v["cases"][case];
        let pkt = c["pkt_bytes"].as_u64().expect("pkt") as u32;
        let published = c["rx_buffer_footprint_MB"].as_f64().expect("MB");
        // Convention: per buffer ceil(pkt/64) lines + one 64 B descriptor line; "MB" in the
        // paper is MiB (12 x 2048 x 128 B = 3.0 MiB exactly), and the README says the
        // footprints are reproduced exactly: so they are asserted equal, to the byte.
        let fp = 12 * ring_footprint_bytes(2048, pkt, DESC_BYTES_PER_PKT);
        let mib = fp as f64 / 1048576.0;
        let verdict = verdict_for(fp as f64, &g);
        let mut s = SimSpec::new(g.clone(), 12, 2048, pkt);
        s.pps = super::spec::line_rate_pps(12.0 * 10.0, pkt);
        let r = simulate(&s);
        let (w, t) = (
            r.total.io_write_hit_pct().unwrap_or(0.0),
            r.total.io_read_hit_pct().unwrap_or(0.0),
        );
        println!(
            "ResQ {case}: footprint {mib:.2} MiB (published {published}), {:.1}x DDIO {:.2} MiB, verdict {}, sim RX write miss {:.1}% (published {}), TX read miss {:.1}%",
            fp as f64 / g.ddio_capacity_bytes() as f64,
            g.ddio_capacity_bytes() as f64 / 1048576.0,
            verdict.as_str(),
            100.0 - w,
            c["rx_io_miss_pct"],
            100.0 - t
        );
        assert_eq!(
            fp,
            (published * 1048576.0).round() as u64,
            "{case}: {mib} MiB vs published {published}"
        );
        verdicts.push(verdict);
        hits.push((w, t));
    }
    // 64 B: 3.0 MiB is 0.67x the 4.5 MiB DDIO share — within capacity, with conflict misses
    // only (ResQ measured 8.5%), so it fits; 1518 B: 8.3x, leaky.
    assert_eq!(verdicts, vec![Verdict::Fits, Verdict::Leaky]);
    assert!(hits[0].0 > 80.0 && hits[1].0 < 30.0, "{hits:?}");
    let ring = super::analytic::max_ring_within_usable(&g, 12, 1518, 64).expect("a ring fits");
    assert!(12 * ring_footprint_bytes(ring, 1518, DESC_BYTES_PER_PKT) <= g.usable_ddio_bytes());
    println!("ResQ: largest ring within usable DDIO capacity at 1518 B: {ring}");
}

/// Model exploration (not part of the suite: it asserts nothing, so `make test` skips it by
/// name): `DDIO_EXPLORE="hash_evenness=0.5,..."` overrides spec keys on every row and prints
/// the tables.
#[test]
#[ignore = "a tool, not a test: cargo test --release explore -- --ignored --nocapture"]
fn explore() {
    let extra = std::env::var("DDIO_EXPLORE").unwrap_or_default();
    let rows = all_rows();
    let pred = predict_all(&rows, &|s| {
        if extra.is_empty() {
            return;
        }
        let base = format!(
            "preset=skx6140,queues={},ring={},pkt_bytes={},pps={},ddio_ways={},consumer=forward,{extra}",
            s.queues, s.ring, s.pkt_bytes, s.pps, s.geometry.ddio_ways
        );
        *s = SimSpec::parse(&base).unwrap();
    });
    report(&rows, &pred);
}
