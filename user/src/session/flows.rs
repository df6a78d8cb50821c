//! Flows as a session reads them: the sampled flows scaled by the exact counts, a window's
//! flows when flows run in the windows alone, and the local TCP sockets' own counts in place
//! of the estimates of the flows that end in them.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::counts::overlay_kernel_counts;
use crate::snapshot::{FlowCounters, QueueCounters, Snapshot};

use super::{flowscale, Session, SessionOptions};

/// How long the last read of a run waits for the close notifications of connections that
/// closed just before it (the kernel sends them once the socket is freed, within milliseconds).
pub(super) const SOCKET_PATIENCE: Duration = Duration::from_millis(300);

impl Session {
    /// Put the local TCP sockets' own counts in place of the estimates of the flows that end
    /// in them; returns those flows. A read that fails (the namespace went away) ends them,
    /// said once in the notes.
    pub(super) fn socket_counts(
        &mut self,
        flows: &mut [crate::probe::qcount::SampledFlow],
        last: bool,
    ) -> std::collections::HashSet<crate::snapshot::FlowKey> {
        let Some(s) = self.sockets.as_mut() else {
            return Default::default();
        };
        let read = if last {
            s.read_last(SOCKET_PATIENCE)
        } else {
            s.read()
        };
        if let Err(e) = read {
            self.counter_notes.push(format!(
                "interval {}: TCP sockets could not be read any more ({e:#}); their flows are estimates from here on",
                self.index
            ));
            self.sockets = None;
            return Default::default();
        }
        if s.overflows > self.socket_overflows {
            if self.socket_overflows == 0 {
                self.counter_notes.push(format!(
                    "interval {}: more TCP connections closed between two reads than their notifications had room for; \
                     those connections' last second is missing from their flows",
                    self.index
                ));
            }
            self.socket_overflows = s.overflows;
        }
        s.table().apply(flows)
    }

    /// A window of the window-only flow programs ended: its flows and counts, with the
    /// driver's counts of the stretch it stands for.
    pub(super) fn flow_window_ended(&mut self, (from, to): (Duration, Duration)) -> Result<()> {
        let Some(f) = self.flow_windows.as_mut() else {
            return Ok(());
        };
        let program = self.tier0.read_queues()?;
        let mut driver = Vec::new();
        if let Some(k) = self.kstats.as_mut() {
            overlay_kernel_counts(&mut driver, &k.queues(), self.kernel_counts);
        }
        let link = match self.splits.iter().any(Option::is_some) {
            true => self.watch.as_mut().and_then(|w| w.link_totals()),
            false => None,
        };
        for (d, split) in self.splits.iter_mut().enumerate() {
            if let (Some(s), Some(link)) = (split.as_mut(), link) {
                overlay_kernel_counts(
                    &mut driver,
                    &s.interval(&program, (link.packets[d], link.bytes[d])),
                    [d == 0, d == 1],
                );
            }
        }
        let now = Instant::now()
            .saturating_duration_since(self.started)
            .as_secs_f64();
        f.programs_ended_at(self.start_ns.saturating_add(to.as_nanos() as u64));
        f.window_ended(
            &self.tier0.read_flows()?,
            &program,
            &driver,
            (from.as_secs_f64(), to.as_secs_f64()),
            now,
        );
        Ok(())
    }

    /// Sampled flows that end in a local TCP socket take its exact counts, from here on.
    /// Where sock_diag is missing or refused, they stay estimates, quietly.
    pub(super) fn open_sockets(&mut self, opts: &SessionOptions, netns_path: Option<&Path>) {
        if opts.detail.flow_sample() > 1 {
            self.sockets = crate::probe::sockets::SocketFlows::open(netns_path)
                .map_err(|e| {
                    if opts.args.verbose {
                        eprintln!("ddioscope: TCP flows stay estimates: {e:#}");
                    }
                })
                .ok();
        }
    }
}

impl Session {
    /// A flow turn: the flows read and scaled, the sockets' own counts in place of the
    /// estimates, the drop reasons, the page pools and the NAPI map.
    pub(super) fn read_flow_turn(
        &mut self,
        snap: &mut Snapshot,
        cur_q: &[QueueCounters],
        finishing: bool,
    ) -> Result<()> {
        let program = self.tier0.read_flows()?;
        snap.flow_overflow = self.tier0.flow_overflow().to_vec();
        let mut flows = flowscale::by_flow(match self.flow_windows.as_mut() {
            Some(f) => f.merge(program, cur_q),
            None => program,
        });
        let from_sockets = self.socket_counts(&mut flows, finishing);
        snap.socket_queues = self
            .sockets
            .as_mut()
            .map(|s| s.table().queue_stats())
            .unwrap_or_default();
        snap.flows = flows
            .into_iter()
            .map(|f| {
                let socket = from_sockets.contains(&f.key);
                FlowCounters {
                    queue: f.queue,
                    packets: f.packets,
                    bytes: f.bytes,
                    payload_bytes: f.payload_bytes,
                    first_ns: f.first_ns,
                    last_ns: f.last_ns,
                    samples: (!socket).then_some(f.samples),
                    bytes_var: (!socket).then_some(f.bytes_var),
                    source: socket.then(|| "socket".to_string()),
                    key: f.key,
                }
            })
            .collect();
        let drops = self.tier0.read_drop_reasons()?;
        snap.drop_reasons = drops.every;
        snap.drops_before_stack = drops.before_stack;
        if let Some(k) = self.kstats.as_mut() {
            snap.page_pools = k.page_pools();
            // Queues get new NAPI instances when the device is reconfigured.
            self.tier0.map_napi(&k.napi_queues())?;
        }
        Ok(())
    }
}
