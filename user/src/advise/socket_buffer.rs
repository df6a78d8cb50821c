//! Socket receive buffer caps (`net.ipv4.tcp_rmem`, `SO_RCVBUF`): recommended when the payload the local sockets hold in their receive queues is more than the DDIO ways can keep until the application copies it, with the model's predicted read hit rate and DRAM traffic before and after, weighed against shrinking the ring.
//!
//! A packet waits in its socket's receive queue until the application reads it; meanwhile
//! the NIC keeps writing, and each DMA write that allocates in the DDIO ways evicts an older
//! line. What the sockets hold beyond the usable DDIO capacity has left the LLC by the time
//! it is copied, so the copy reads it from DRAM and the line was written back there first.
//! A smaller receive buffer bounds what a socket can hold (the sender's window follows it);
//! its cost is throughput: a connection moves at most one window per round trip.

use super::{round1, HostObservation, Kind, ModelRun, Recommendation};
use crate::model::analytic::Dir;
use crate::model::sim::SimResult;
use crate::model::spec::Consumer;

/// Smallest cap recommended: the kernel's initial receive buffer (tcp_rmem's middle value).
const MIN_CAP: u64 = 131_072;

/// The recommendation, or None when the sockets' queues fit (or were not measured).
pub fn socket_buffer(obs: &HostObservation, run: &ModelRun) -> Option<Recommendation> {
    let spec = run.spec()?;
    if spec.consumer != Consumer::Copy {
        return None;
    }
    let rx: Vec<_> = obs
        .queues
        .iter()
        .filter(|q| q.dir == Dir::Rx)
        .filter_map(|q| q.socket.as_ref())
        .collect();
    let sockets: u32 = rx.iter().map(|s| s.sockets).sum();
    if sockets == 0 {
        return None;
    }
    let held: f64 = rx.iter().map(|s| s.rmem_bytes.max(s.queued_bytes)).sum();
    let queued: f64 = rx.iter().map(|s| s.queued_bytes).sum();
    let usable = obs.geometry.usable_ddio_bytes() as f64;
    if held <= usable || queued <= 0.0 {
        return None;
    }
    // Per socket, the memory (truesize) its queue may hold so that all of them together fit
    // the usable DDIO capacity; the receive buffer bounds exactly that (sk_rmem_alloc).
    let cap = (((usable / sockets as f64) as u64) / 4096 * 4096).max(MIN_CAP);
    let rcvbuf = rx.iter().map(|s| s.rcvbuf_max).max().unwrap_or(0);
    if rcvbuf > 0 && cap >= rcvbuf {
        return None;
    }
    let scale = ((cap as f64 * sockets as f64) / held).min(1.0);
    let before = run.result(None, None)?;
    let after = run.variant(|s| {
        for b in s.queue_socket_bytes.iter_mut() {
            *b *= scale;
        }
        if let Some(b) = s.socket_queue_bytes.as_mut() {
            *b *= scale;
        }
    })?;
    let mib = |b: f64| b / 1048576.0;
    // Bandwidths and waits at the scale they come in.
    let bw = |g: f64| {
        if g.abs() >= 0.1 {
            format!("{g:.2} GB/s")
        } else {
            format!("{:.2} MB/s", g * 1e3)
        }
    };
    let wait = |s: f64| {
        if s >= 1.0 {
            format!("{s:.2} s")
        } else if s >= 1e-3 {
            format!("{:.1} ms", s * 1e3)
        } else {
            format!("{:.0} µs", s * 1e6)
        }
    };
    let dram = |r: &SimResult| r.dram(&r.total).map(|d| d.read_gbps + d.write_gbps);
    let hit = |r: &SimResult| r.total.cpu_read_hit_pct().map(round1);
    let drain: f64 = rx.iter().map(|s| s.drain_bytes_per_s).sum();
    let per_socket_rate = drain / sockets as f64;
    let mut evidence = vec![
        format!(
            "{sockets} local socket(s) hold {:.1} MiB in their receive queues ({:.1} MiB of payload; largest receive buffer {:.1} MiB), against {:.2} MiB of usable DDIO capacity: what waits beyond it is evicted before the application copies it",
            mib(held),
            mib(queued),
            mib(rcvbuf as f64),
            mib(usable)
        ),
        format!(
            "the applications read {:.1} MB/s; a byte waits {} in its socket (Little's law: queued / drain rate)",
            drain / 1e6,
            wait(if drain > 0.0 { queued / drain } else { 0.0 })
        ),
    ];
    let (db, da) = (dram(&before), dram(&after));
    if let (Some(b), Some(a)) = (db, da) {
        evidence.push(format!(
            "predicted DRAM traffic of the network: {} now, {} with receive buffers of {:.0} KiB",
            bw(b),
            bw(a),
            cap as f64 / 1024.0
        ));
    }
    // The ring's alternative: half the ring, by the same model, and what it costs in drops.
    if let Some(ring) = run.spec().map(|s| s.ring).filter(|r| *r >= 128) {
        if let Some(r) = run.result(Some(ring / 2), None) {
            if let (Some(b), Some(a), Some(s)) = (db, dram(&r), da) {
                evidence.push(format!(
                    "against a ring of {} instead of {ring}: DRAM {} ({} simulated drops); the socket cap saves {}, the ring {}",
                    ring / 2,
                    bw(a),
                    r.drops,
                    bw(b - s),
                    bw(b - a)
                ));
            }
        }
    }
    if per_socket_rate > 0.0 {
        evidence.push(format!(
            "cost: a connection moves at most one window per round trip; a {:.0} KiB buffer (about half of it window) keeps its {:.1} MB/s while the RTT stays under {}",
            cap as f64 / 1024.0,
            per_socket_rate / 1e6,
            wait(cap as f64 / 2.0 / per_socket_rate)
        ));
    }
    Some(Recommendation {
        kind: Kind::SocketBuffer,
        target: format!("{} local TCP sockets", obs.iface),
        // tcp_rmem is the sockets' own namespace's; rmem_max (the cap on SO_RCVBUF, which
        // the kernel doubles) is the host's, and only the initial namespace may write it.
        command: format!(
            "{}\nsysctl -w net.core.rmem_max={}",
            obs.device.run(&format!(
                "sysctl -w net.ipv4.tcp_rmem=\"4096 131072 {cap}\""
            )),
            cap / 2
        ),
        evidence,
        predicted_metric: Some("cpu_read_hit_pct (the copy's LLC hits)".into()),
        predicted_before: hit(&before),
        predicted_after: hit(&after),
        reason: None,
    })
}
