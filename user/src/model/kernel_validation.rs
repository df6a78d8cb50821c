//! Validation of the kernel-stack model (driver buffer rules, socket-queue residence, DRAM traffic) against the published kernel-stack rows in tests/fixtures/model/kernel_stack_mlx5_icx.csv: trends in flows, ring size and socket buffer size, and levels within the stated errors.

use super::spec::{simulate, SimSpec};

/// The testbed of the rows: a 39 MiB, 12-way LLC with 2 DDIO ways, mlx5's striding RQ at
/// MTU 9000 (9014 B frames), 200 Gb/s over the flows, one flow per queue, the copy
/// consumer. Each flow's socket holds tcp_rmem's default maximum (6 MiB): an iperf3
/// receiver is bound by its copy, so autotuning grows its buffer to the cap and the queue
/// stays near it.
fn spec(flows: u32, ring: u32, socket_bytes: u32) -> SimSpec {
    SimSpec::parse(&format!(
        "llc_mib=39,ways=12,ddio_ways=2,mtu=9000,driver=mlx5,pkt_bytes=9014,rate_gbps=200,consumer=copy,queues={flows},ring={ring},socket_queue_bytes={socket_bytes},max_packets=300000"
    ))
    .unwrap_or_else(|e| panic!("{e}"))
}

const TCP_RMEM_MAX: u32 = 6_291_456;

/// (copy read miss %, DRAM GB/s read + write).
fn run(flows: u32, ring: u32, socket_bytes: u32) -> (f64, f64) {
    let r = simulate(&spec(flows, ring, socket_bytes));
    let d = r.dram(&r.total).unwrap_or_default();
    (
        r.total.cpu_read_miss_pct().unwrap_or(f64::NAN),
        d.read_gbps + d.write_gbps,
    )
}

fn rows() -> Vec<(String, u32, u32, String, f64)> {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/model/kernel_stack_mlx5_icx.csv"
    );
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("case") && !l.trim().is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split(',').map(str::trim).collect();
            (
                c[0].to_string(),
                c[1].parse().unwrap_or(0),
                c[2].parse().unwrap_or(0),
                c[3].to_string(),
                c[4].parse().unwrap_or(f64::NAN),
            )
        })
        .collect()
}

#[test]
fn kernel_stack_rows_trends_and_levels() {
    let rows = rows();
    assert_eq!(rows.len(), 6);
    let mut table = Vec::new();
    let mut dram_first = None;
    for (case, flows, ring, metric, measured) in &rows {
        let (miss, dram) = run(*flows, *ring, TCP_RMEM_MAX);
        let model = if metric == "dram_relative" {
            let base = *dram_first.get_or_insert(dram);
            dram / base
        } else {
            miss
        };
        println!("{case}: {flows} flow(s), ring {ring}: {metric} measured {measured}, model {model:.2} (DRAM {dram:.2} GB/s)");
        table.push((case.clone(), *flows, *ring, *measured, model));
    }
    let m = |c: &str, f: u32, r: u32| {
        table
            .iter()
            .find(|t| t.0 == c && t.1 == f && t.2 == r)
            .map(|t| (t.3, t.4))
            .unwrap_or((f64::NAN, f64::NAN))
    };
    // Trends: six flows miss more than one at the same ring; a doubled ring misses more;
    // a quarter of the ring costs less DRAM traffic.
    assert!(m("flows", 6, 1024).1 > m("flows", 1, 1024).1 + 20.0);
    assert!(m("ring", 1, 2048).1 > m("ring", 1, 1024).1 + 3.0);
    assert!(m("dram", 4, 256).1 < 0.8);
    // Levels: the one-flow rows within 8 points of the published "about" values; the
    // six-flow row within 40 (each flow's socket is taken as full, which six flows sharing
    // 200 Gb/s need not be: docs/model.md); the DRAM ratio within 0.25.
    for (c, f, r, tol) in [
        ("flows", 1, 1024, 8.0),
        ("ring", 1, 1024, 8.0),
        ("ring", 1, 2048, 8.0),
        ("flows", 6, 1024, 40.0),
        ("dram", 4, 256, 0.25),
    ] {
        let (meas, model) = m(c, f, r);
        assert!(
            (model - meas).abs() <= tol,
            "{c} {f} flows ring {r}: model {model:.2} vs {meas} (±{tol})"
        );
    }
}

#[test]
fn misses_and_dram_grow_with_flows_ring_and_socket_buffer() {
    // Flows per LLC at the same ring and socket buffer.
    let by_flows: Vec<(f64, f64)> = [1, 2, 4, 6]
        .iter()
        .map(|f| run(*f, 1024, TCP_RMEM_MAX))
        .collect();
    // Ring size, one flow.
    let by_ring: Vec<(f64, f64)> = [512, 1024, 2048, 4096]
        .iter()
        .map(|r| run(1, *r, TCP_RMEM_MAX))
        .collect();
    // Socket buffer size, four flows.
    let by_sock: Vec<(f64, f64)> = [131_072, 1_048_576, 3_145_728, TCP_RMEM_MAX]
        .iter()
        .map(|b| run(4, 1024, *b))
        .collect();
    println!("by flows {by_flows:?}\nby ring {by_ring:?}\nby socket buffer {by_sock:?}");
    for (name, v) in [
        ("flows", &by_flows),
        ("ring", &by_ring),
        ("socket buffer", &by_sock),
    ] {
        for w in v.windows(2) {
            // Monotone within the simulator's sampling noise (0.5 points, 0.5 GB/s).
            assert!(w[1].0 >= w[0].0 - 0.5, "{name}: miss {v:?}");
            assert!(w[1].1 >= w[0].1 - 0.5, "{name}: DRAM {v:?}");
        }
        assert!(v[v.len() - 1].0 > v[0].0, "{name}: {v:?}");
    }
}
