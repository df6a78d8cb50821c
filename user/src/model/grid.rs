//! The what-if grid behind `ddioscope simulate`: one simulation per (ring, DDIO ways, queues, packet size) point, validated up front, bounded in size, with a progress callback for long grids.

use serde::{Deserialize, Serialize};

use super::analytic::{self, Verdict};
use super::drive::{estimated_accesses, simulate};
use super::geometry::WaysSource;
use super::spec::{bounds, SimSpec, SpecError};

/// One point of the what-if grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GridPoint {
    pub ring: u32,
    pub ddio_ways: u32,
    pub ddio_mask: u64,
    pub queues: u32,
    pub pkt_bytes: u32,
    pub footprint_bytes: u64,
    pub ddio_capacity_bytes: u64,
    pub verdict: Verdict,
    pub io_write_hit_pct: Option<f64>,
    pub io_read_hit_pct: Option<f64>,
    pub cpu_read_hit_pct: Option<f64>,
    /// DRAM traffic the network causes, GB/s (reads, write-backs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_read_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_write_gbps: Option<f64>,
    pub drops: u64,
    /// Why this point was not simulated (its spec is out of range), if it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The values each axis of a grid takes; an empty axis keeps the base spec's value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Axes<'a> {
    pub rings: &'a [u32],
    pub ways: &'a [u32],
    pub queues: &'a [u32],
    pub pkt_bytes: &'a [u32],
}

impl Axes<'_> {
    fn points(&self) -> usize {
        let n = |v: &[u32]| v.len().max(1);
        n(self.rings)
            .saturating_mul(n(self.ways))
            .saturating_mul(n(self.queues))
            .saturating_mul(n(self.pkt_bytes))
    }
}

/// The spec of every grid point, in output order; an empty axis keeps the base value. The
/// aggregate packet rate of `base` is held constant as queues change (the same traffic
/// spread differently), and converted at constant bit rate as packet size changes.
fn point_specs(base: &SimSpec, ax: &Axes) -> Vec<SimSpec> {
    let axis = |v: &[u32], d: u32| if v.is_empty() { vec![d] } else { v.to_vec() };
    let Axes {
        rings,
        ways,
        queues,
        pkt_bytes,
    } = *ax;
    let bitrate = base.pps * (base.pkt_bytes as f64 + 20.0) * 8.0;
    let mut out = Vec::new();
    for &r in &axis(rings, base.ring) {
        for &w in &axis(ways, base.geometry.ddio_ways) {
            for &q in &axis(queues, base.queues) {
                for &p in &axis(pkt_bytes, base.pkt_bytes) {
                    let mut s = base.clone();
                    s.ring = r;
                    s.geometry.ddio_ways = w;
                    s.geometry.ddio_ways_source = WaysSource::Override;
                    if q != base.queues {
                        s.queues = q;
                        s.queue_weights.clear();
                        s.queue_residence_us.clear();
                        s.flows.retain(|f| f.queue < q);
                    }
                    if p != base.pkt_bytes {
                        s.pkt_bytes = p;
                        s.pps = bitrate / ((p as f64 + 20.0) * 8.0);
                        s.flows.clear();
                    }
                    out.push(s);
                }
            }
        }
    }
    out
}

/// Validate the whole grid before simulating any of it: the first out-of-range point, a
/// grid beyond [`bounds::MAX_GRID_POINTS`] or one that would cost more than
/// [`check_cost`] allows is one error line. For the CLI.
pub fn try_what_if(
    base: &SimSpec,
    axes: &Axes,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<GridPoint>, SpecError> {
    let n = axes.points();
    if n > bounds::MAX_GRID_POINTS {
        return Err(SpecError::Value(
            "grid".into(),
            format!("{n} points (at most {})", bounds::MAX_GRID_POINTS),
        ));
    }
    let specs = point_specs(base, axes);
    for s in &specs {
        s.validate()?;
    }
    check_cost(&specs)?;
    Ok(what_if_with_progress(base, axes, progress))
}

/// Refuse, before running any of them, runs whose estimated cache-line accesses
/// ([`estimated_accesses`]) pass a bound: one run's [`bounds::MAX_LINE_ACCESSES`] (which only
/// the other cores' background can pass: the packets are cut to fit) or all of them together
/// [`bounds::MAX_COMMAND_ACCESSES`]. The error says what to shrink.
pub fn check_cost(specs: &[SimSpec]) -> Result<(), SpecError> {
    let m = |x: f64| format!("{:.0} M", x / 1e6);
    let mut total = 0.0;
    for s in specs {
        let est = estimated_accesses(s);
        if est > bounds::MAX_LINE_ACCESSES as f64 {
            let bg = s.background.lines_per_sec;
            let shrink = if bg > s.pps * super::drive::lines_per_packet(s) {
                "lower bg_lines_per_sec"
            } else {
                "lower max_packets or measure_cycles"
            };
            return Err(SpecError::Value(
                "cost".into(),
                format!(
                    "one run would simulate about {} cache-line accesses (at most {}): {shrink}",
                    m(est),
                    m(bounds::MAX_LINE_ACCESSES as f64)
                ),
            ));
        }
        total += est;
    }
    if total > bounds::MAX_COMMAND_ACCESSES as f64 {
        return Err(SpecError::Value(
            "cost".into(),
            format!(
                "{} runs would simulate about {} cache-line accesses (at most {}): give fewer --ring, --ways, --queues or --pkt-bytes values",
                specs.len(),
                m(total),
                m(bounds::MAX_COMMAND_ACCESSES as f64)
            ),
        ));
    }
    Ok(())
}

/// Simulate every combination; see [`what_if_with_progress`].
pub fn what_if(
    base: &SimSpec,
    rings: &[u32],
    ways: &[u32],
    queues: &[u32],
    pkt_bytes: &[u32],
) -> Vec<GridPoint> {
    what_if_with_progress(
        base,
        &Axes {
            rings,
            ways,
            queues,
            pkt_bytes,
        },
        &mut |_, _| {},
    )
}

/// Simulate every combination; an empty axis keeps the base value. `progress(done, total)`
/// is called before the first point and after each one. A point whose spec is out of range
/// is not simulated: it carries the error and no hit rates. Grids beyond
/// [`bounds::MAX_GRID_POINTS`] are cut to that many points (use [`try_what_if`] to refuse).
pub fn what_if_with_progress(
    base: &SimSpec,
    axes: &Axes,
    progress: &mut dyn FnMut(usize, usize),
) -> Vec<GridPoint> {
    let mut specs = point_specs(base, axes);
    specs.truncate(bounds::MAX_GRID_POINTS);
    let total = specs.len();
    progress(0, total);
    let mut out = Vec::with_capacity(total);
    for (i, s) in specs.into_iter().enumerate() {
        let footprint = s.total_ring_footprint_bytes();
        let cap = s.geometry.ddio_capacity_bytes();
        let mut p = GridPoint {
            ring: s.ring,
            ddio_ways: s.geometry.ddio_ways,
            ddio_mask: s.geometry.ddio_mask(),
            queues: s.queues,
            pkt_bytes: s.pkt_bytes,
            footprint_bytes: footprint,
            ddio_capacity_bytes: cap,
            verdict: analytic::verdict_for(footprint as f64, &s.geometry),
            io_write_hit_pct: None,
            io_read_hit_pct: None,
            cpu_read_hit_pct: None,
            dram_read_gbps: None,
            dram_write_gbps: None,
            drops: 0,
            error: None,
        };
        match s.validate() {
            Ok(()) => {
                let r = simulate(&s);
                p.io_write_hit_pct = r.total.io_write_hit_pct();
                p.io_read_hit_pct = r.total.io_read_hit_pct();
                p.cpu_read_hit_pct = r.total.cpu_read_hit_pct();
                let d = r.dram(&r.total);
                p.dram_read_gbps = d.map(|d| d.read_gbps);
                p.dram_write_gbps = d.map(|d| d.write_gbps);
                p.drops = r.drops;
            }
            Err(e) => p.error = Some(e.to_string()),
        }
        out.push(p);
        progress(i + 1, total);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another core's accesses count toward one run's bound: a slow device beside a busy
    /// socket (a background fitted to the memory controllers' reads) is simulated for fewer
    /// packets, not for hundreds of times the bound.
    #[test]
    fn one_runs_bound_counts_the_background() {
        let s = SimSpec::parse(
            "queues=1,ring=256,pkt_bytes=1500,rate_gbps=1,bg_lines_per_sec=1e10,bg_working_set_mib=64",
        )
        .unwrap();
        let est = estimated_accesses(&s);
        println!(
            "estimated {est:.3e} accesses, {} packets",
            s.bounded().max_packets
        );
        assert!(est <= 1.05 * bounds::MAX_LINE_ACCESSES as f64, "{est:e}");
        assert!(s.bounded().max_packets < s.max_packets);
    }

    /// The estimate a cost bound rests on, against the simulator's own count of what it did.
    #[test]
    fn estimated_accesses_match_the_runs() {
        let specs = [
            "queues=1,ring=1024,pkt_bytes=1500",
            "queues=4,ring=512,pkt_bytes=64,rate_gbps=10",
            "queues=2,ring=256,pkt_bytes=1024,consumer=copy,residence_us=20,rate_gbps=20",
            "queues=8,ring=2048,pkt_bytes=512,rate_gbps=40,queue_weights=4/1/1/1/1/1/1/1",
            "queues=1,ring=64,pkt_bytes=1500,rate_gbps=20,bg_lines_per_sec=2e8,bg_working_set_mib=64",
            "queues=1,ring=1024,pkt_bytes=9000,buf_stride=9600,data_offset=256,rate_gbps=50,consumer=copy",
        ];
        for text in specs {
            let s = SimSpec::parse(text).unwrap();
            let r = simulate(&s);
            let (est, got) = (estimated_accesses(&s), r.lines_simulated as f64);
            println!(
                "{text}: estimated {est:.0}, simulated {got:.0} ({:+.1} %), {} drops",
                100.0 * (est / got - 1.0),
                r.drops
            );
            // Drops only make the estimate high (a dropped packet touches nothing).
            assert!(
                est >= 0.98 * got && (est <= 1.02 * got || r.drops > 0),
                "{text}: estimated {est}, simulated {got}"
            );
        }
    }

    /// What the slow cases now get: one line, before any simulation.
    #[test]
    fn grids_and_runs_beyond_the_cost_bound_are_refused_up_front() {
        let base = SimSpec::parse("ring=1024").unwrap();
        let rings: Vec<u32> = (1..=1024).collect();
        let mut n = 0;
        let e = try_what_if(
            &base,
            &Axes {
                rings: &rings,
                ..Axes::default()
            },
            &mut |_, _| n += 1,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("1024 runs") && e.contains("at most 1000 M") && e.contains("fewer --ring"),
            "{e}"
        );
        assert_eq!(n, 0);
        let bg = SimSpec::parse("bg_lines_per_sec=1e11,bg_working_set_mib=1048576").unwrap();
        let e = try_what_if(&bg, &Axes::default(), &mut |_, _| n += 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("one run") && e.contains("at most 400 M") && e.contains("bg_lines_per_sec"),
            "{e}"
        );
        assert_eq!(n, 0);
        // The README's grid stays well inside.
        let readme = SimSpec::parse("preset=skx6140,queues=4,ring=1024,pkt_bytes=1500").unwrap();
        let pts = point_specs(
            &readme,
            &Axes {
                rings: &[256, 512, 1024, 2048],
                ways: &[2, 4],
                ..Axes::default()
            },
        );
        let total: f64 = pts.iter().map(estimated_accesses).sum();
        assert!(
            check_cost(&pts).is_ok() && total < 0.2 * bounds::MAX_COMMAND_ACCESSES as f64,
            "{total}"
        );
    }

    #[test]
    fn progress_counts_every_point_and_bad_points_say_why() {
        let mut base = SimSpec::parse("queues=2,ring=512,pkt_bytes=1024,rate_gbps=40").unwrap();
        base.max_packets = 50_000;
        let mut calls = Vec::new();
        let g = what_if_with_progress(
            &base,
            &Axes {
                rings: &[256, 0, 1024],
                ways: &[2, 3],
                ..Axes::default()
            },
            &mut |d, t| calls.push((d, t)),
        );
        assert_eq!(g.len(), 6);
        assert_eq!(calls, (0..=6).map(|d| (d, 6)).collect::<Vec<_>>());
        let bad: Vec<_> = g.iter().filter(|p| p.error.is_some()).collect();
        assert_eq!(bad.len(), 2);
        assert!(bad.iter().all(|p| p.ring == 0
            && p.io_write_hit_pct.is_none()
            && p.error.as_deref().unwrap().contains("`ring` = 0")));
        assert!(g
            .iter()
            .filter(|p| p.ring != 0)
            .all(|p| p.io_write_hit_pct.is_some()));
        // The CLI's entry refuses the grid before simulating any of it.
        let mut n = 0;
        let e = try_what_if(
            &base,
            &Axes {
                rings: &[256, 0],
                ..Axes::default()
            },
            &mut |_, _| n += 1,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("`ring` = 0 is out of range (1..=65536)"),
            "{e}"
        );
        assert_eq!(n, 0);
        let many: Vec<u32> = (1..=100).collect();
        let e = try_what_if(
            &base,
            &Axes {
                rings: &many,
                ways: &many,
                ..Axes::default()
            },
            &mut |_, _| {},
        )
        .unwrap_err();
        assert!(e.to_string().contains("10000 points (at most 4096)"), "{e}");
    }
}
