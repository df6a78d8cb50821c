//! Exact byte and segment counts of the host's own TCP connections, from the kernel's
//! per-socket statistics (sock_diag's `tcp_info`): a flow source that runs no program per
//! packet, used in place of sampled estimates for the flows that end in a local socket.
//!
//! The socket table is dumped once per flow read, and connections that close in between are
//! caught by the kernel's destroy notifications (which carry their final counts), so a
//! connection that lives between two reads is counted whole. Connections open when the
//! recording starts count from there. A connection's packets are the segments its socket
//! received or sent (what crossed the wire, retransmissions included), its payload the bytes
//! it received or sent (the kernel counts a FIN received as one byte); it keeps no header bytes, so a flow's frame bytes are its
//! payload plus its packets times the header size its own samples show.
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::probe::qcount::SampledFlow;
use crate::snapshot::{Dir, FlowKey};
use crate::topology::netlink::{self, Netlink};

const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// Destroy notifications of IPv4 and IPv6 TCP sockets (groups 1 and 3, bits 0 and 2).
const TCP_DESTROY_GROUPS: u32 = 1 | 1 << 2;
/// The inet_diag attribute that carries `struct tcp_info`, and its request bit.
const INET_DIAG_INFO: u16 = 2;
/// The attribute with the socket's memory (`sk_meminfo`: u32 SK_MEMINFO_RMEM_ALLOC,
/// SK_MEMINFO_RCVBUF, ...), what `ss -m` prints as skmem.
const INET_DIAG_SKMEMINFO: u16 = 7;
/// `idiag_rqueue` in `struct inet_diag_msg`: for a TCP socket, rcv_nxt − copied_seq, the
/// payload received and not yet read by the application (tcp_diag.c tcp_diag_get_info).
const DIAG_RQUEUE: usize = 56;
/// Every TCP state whose socket is a full one with counters: not LISTEN (10), TIME_WAIT (6) or
/// NEW_SYN_RECV (12), which are listeners and mini-sockets.
const STATES: u32 = (1 << 1)
    | (1 << 2)
    | (1 << 3)
    | (1 << 4)
    | (1 << 5)
    | (1 << 7)
    | (1 << 8)
    | (1 << 9)
    | (1 << 11);
/// `struct inet_diag_msg` (uapi linux/inet_diag.h): family, then the socket id's ports (big
/// endian), addresses and cookie, then fields not read here.
const DIAG_MSG_LEN: usize = 72;
/// Offsets in `struct tcp_info` (uapi linux/tcp.h, which only ever grows at its end).
const TCPI_BYTES_ACKED: usize = 120;
const TCPI_BYTES_RECEIVED: usize = 128;
const TCPI_SEGS_OUT: usize = 136;
const TCPI_SEGS_IN: usize = 140;
const TCPI_BYTES_SENT: usize = 200;
/// Destroy notifications queue up between reads: room for tens of thousands.
const DESTROY_RCVBUF: usize = 8 << 20;
/// A closed connection no flow has claimed is kept this long (a flow is found in the first
/// window after it, and flows are read about once a second), and at most this many.
const CLOSED_GRACE: Duration = Duration::from_secs(10);
const MAX_CLOSED: usize = 1 << 16;

/// One connection as its socket sees it: local end first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conn {
    pub local: IpAddr,
    pub lport: u16,
    pub remote: IpAddr,
    pub rport: u16,
}

/// A connection's counts, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub segs_in: u64,
    pub segs_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl Counts {
    fn since(self, base: Counts) -> Counts {
        Counts {
            segs_in: self.segs_in.saturating_sub(base.segs_in),
            segs_out: self.segs_out.saturating_sub(base.segs_out),
            bytes_in: self.bytes_in.saturating_sub(base.bytes_in),
            bytes_out: self.bytes_out.saturating_sub(base.bytes_out),
        }
    }

    fn add(&mut self, o: Counts) {
        self.segs_in += o.segs_in;
        self.segs_out += o.segs_out;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
    }
}

/// A socket's receive queue at one read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueSample {
    /// Payload received and not yet read (`idiag_rqueue`, ss's Recv-Q).
    pub rqueue: u64,
    /// Memory its queued buffers hold (skmem `r`, truesize), where the kernel said.
    pub rmem: Option<u64>,
    /// Its receive buffer limit (skmem `rb`).
    pub rcvbuf: Option<u64>,
}

/// One socket from a dump or a destroy notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketStat {
    pub cookie: u64,
    pub conn: Conn,
    pub counts: Counts,
    pub queue: QueueSample,
}

/// A connection's receive queue over the reads that listed it: what it held on average
/// and how fast the application drained it, for its residence (Little's law: queued / drain
/// rate).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueueSummary {
    pub reads: u64,
    pub rqueue_sum: u64,
    pub rqueue_max: u64,
    pub rmem_sum: u64,
    pub rcvbuf_max: u64,
    /// Payload the application read between the first and the last read.
    pub drained_bytes: u64,
    /// Time between the first and the last read, ns.
    pub span_ns: u64,
}

impl QueueSummary {
    fn merge(&mut self, o: &QueueSummary) {
        self.reads += o.reads;
        self.rqueue_sum += o.rqueue_sum;
        self.rqueue_max = self.rqueue_max.max(o.rqueue_max);
        self.rmem_sum += o.rmem_sum;
        self.rcvbuf_max = self.rcvbuf_max.max(o.rcvbuf_max);
        self.drained_bytes += o.drained_bytes;
        self.span_ns += o.span_ns;
    }
}

/// One connection's receive-queue readings so far.
#[derive(Debug, Clone, Copy, Default)]
struct QueueAcc {
    sum: QueueSummary,
    /// (time, bytes received, queued) at the first and the last read.
    first: Option<(Instant, u64, u64)>,
    last: Option<(Instant, u64, u64)>,
}

impl QueueAcc {
    fn observe(&mut self, now: Instant, s: &SocketStat) {
        let q = &s.queue;
        self.sum.reads += 1;
        self.sum.rqueue_sum += q.rqueue;
        self.sum.rqueue_max = self.sum.rqueue_max.max(q.rqueue);
        self.sum.rmem_sum += q.rmem.unwrap_or(0);
        self.sum.rcvbuf_max = self.sum.rcvbuf_max.max(q.rcvbuf.unwrap_or(0));
        let at = (now, s.counts.bytes_in, q.rqueue);
        self.first.get_or_insert(at);
        self.last = Some(at);
    }

    /// The readings with the drained bytes between the first and last read: what arrived
    /// less what the queue grew by.
    fn summary(&self) -> QueueSummary {
        let mut s = self.sum;
        if let (Some(a), Some(b)) = (self.first, self.last) {
            let arrived = b.1.saturating_sub(a.1) as i128;
            let grew = b.2 as i128 - a.2 as i128;
            s.drained_bytes = (arrived - grew).max(0) as u64;
            s.span_ns = b.0.duration_since(a.0).as_nanos() as u64;
        }
        s
    }
}

/// An address as the probes key flows: IPv4 in its own form, also when an IPv6 socket
/// carries it mapped.
fn addr(family: u8, raw: &[u8]) -> Option<IpAddr> {
    match family as i32 {
        libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))),
        libc::AF_INET6 => {
            let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(&raw[..16]).ok()?);
            Some(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4))
        }
        _ => None,
    }
}

/// Parse one `inet_diag_msg` with its attributes (None: not a TCP socket with counters).
pub fn parse_diag(msg: &[u8]) -> Option<SocketStat> {
    if msg.len() < DIAG_MSG_LEN {
        return None;
    }
    let family = msg[0];
    let lport = u16::from_be_bytes([msg[4], msg[5]]);
    let rport = u16::from_be_bytes([msg[6], msg[7]]);
    let local = addr(family, &msg[8..24])?;
    let remote = addr(family, &msg[24..40])?;
    let cookie = u64::from(u32::from_ne_bytes(msg[44..48].try_into().ok()?))
        | u64::from(u32::from_ne_bytes(msg[48..52].try_into().ok()?)) << 32;
    let info = netlink::attrs(&msg[DIAG_MSG_LEN..])
        .into_iter()
        .find(|(k, _)| *k == INET_DIAG_INFO)?
        .1;
    let u64_at = |o: usize| {
        info.get(o..o + 8)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or_default()))
    };
    let u32_at = |o: usize| {
        info.get(o..o + 4)
            .map(|b| u64::from(u32::from_ne_bytes(b.try_into().unwrap_or_default())))
    };
    let attrs = netlink::attrs(&msg[DIAG_MSG_LEN..]);
    let mem = |i: usize| {
        attrs
            .iter()
            .find(|(k, _)| *k == INET_DIAG_SKMEMINFO)
            .and_then(|(_, v)| v.get(i * 4..i * 4 + 4))
            .map(|b| u64::from(u32::from_ne_bytes(b.try_into().unwrap_or_default())))
    };
    let queue = QueueSample {
        rqueue: u64::from(u32::from_ne_bytes(
            msg[DIAG_RQUEUE..DIAG_RQUEUE + 4].try_into().ok()?,
        )),
        rmem: mem(0),
        rcvbuf: mem(1),
    };
    let counts = Counts {
        segs_in: u32_at(TCPI_SEGS_IN)?,
        segs_out: u32_at(TCPI_SEGS_OUT)?,
        bytes_in: u64_at(TCPI_BYTES_RECEIVED)?,
        // Bytes sent (retransmissions included, as on the wire) where the kernel has them
        // (5.5 on), else the bytes acknowledged.
        bytes_out: u64_at(TCPI_BYTES_SENT).or_else(|| u64_at(TCPI_BYTES_ACKED))?,
    };
    Some(SocketStat {
        cookie,
        conn: Conn {
            local,
            lport,
            remote,
            rport,
        },
        counts,
        queue,
    })
}

/// A connection open at the last read.
#[derive(Debug, Clone, Copy)]
struct Open {
    conn: Conn,
    base: Counts,
    now: Counts,
    /// Reads in a row that did not list it (it closed; its notification may come late).
    missed: u8,
    queue: QueueAcc,
}

/// What closed connections of one four-tuple added up to.
#[derive(Debug, Clone, Copy)]
struct Closed {
    counts: Counts,
    at: Instant,
    /// A flow has claimed it: kept for the rest of the run.
    claimed: bool,
    /// Its receive queue over the reads that listed it.
    queue: QueueSummary,
}

/// The per-connection counts of one network namespace since the recording started.
#[derive(Debug, Default)]
pub struct SocketTable {
    open: HashMap<u64, Open>,
    closed: HashMap<Conn, Closed>,
    /// Sockets the first read found: counted from there, not from their start.
    started: bool,
    /// Closed connections whose last counts are from a dump, not their destroy notification
    /// (the notifications overflowed, or came too late): up to a read's worth lost each.
    pub unseen_ends: u64,
    /// Closed connections dropped unclaimed past MAX_CLOSED.
    pub dropped: u64,
}

impl SocketTable {
    /// Take one read: the sockets a dump listed, and the destroy notifications since the last.
    pub fn update(&mut self, listed: &[SocketStat], destroyed: &[SocketStat], now: Instant) {
        let first = !self.started;
        self.started = true;
        self.ended(destroyed, now);
        for s in listed {
            let base = if first { s.counts } else { Counts::default() };
            let o = self.open.entry(s.cookie).or_insert(Open {
                conn: s.conn,
                base,
                now: s.counts,
                missed: 0,
                queue: QueueAcc::default(),
            });
            o.now = s.counts;
            o.missed = 0;
            o.queue.observe(now, s);
        }
        if !first {
            let listed: HashSet<u64> = listed.iter().map(|s| s.cookie).collect();
            let mut gone = Vec::new();
            for (cookie, o) in self.open.iter_mut() {
                if !listed.contains(cookie) {
                    o.missed += 1;
                    // One read's grace for its notification, which the kernel sends from a work queue.
                    if o.missed > 1 {
                        gone.push(*cookie);
                    }
                }
            }
            for cookie in gone {
                if let Some(o) = self.open.remove(&cookie) {
                    self.unseen_ends += 1;
                    self.close(o.conn, o.now.since(o.base), o.queue.summary(), now);
                }
            }
        }
        self.prune(now);
    }

    /// Close notifications alone (between dumps).
    pub fn ended(&mut self, destroyed: &[SocketStat], now: Instant) {
        for d in destroyed {
            let (base, queue) = match self.open.remove(&d.cookie) {
                Some(o) => (o.base, o.queue.summary()),
                // Opened and closed between two reads: whole; or opened before the first read
                // and closed before it listed it: its counts before the start are unknown and
                // count as the run's.
                None => (Counts::default(), QueueSummary::default()),
            };
            self.close(d.conn, d.counts.since(base), queue, now);
        }
    }

    /// Whether a connection the last dump no longer listed still waits for its notification.
    pub fn awaiting(&self) -> bool {
        self.open.values().any(|o| o.missed > 0)
    }

    fn close(&mut self, conn: Conn, counts: Counts, queue: QueueSummary, now: Instant) {
        let c = self.closed.entry(conn).or_insert(Closed {
            counts: Counts::default(),
            at: now,
            claimed: false,
            queue: QueueSummary::default(),
        });
        c.counts.add(counts);
        c.queue.merge(&queue);
        c.at = now;
    }

    /// Every four-tuple's receive queue over the run so far, open and closed connections
    /// together; only those some read found with data.
    pub fn queues(&self) -> Vec<(Conn, QueueSummary)> {
        let mut m: HashMap<Conn, QueueSummary> = HashMap::new();
        for (k, c) in &self.closed {
            m.entry(*k).or_default().merge(&c.queue);
        }
        for o in self.open.values() {
            m.entry(o.conn).or_default().merge(&o.queue.summary());
        }
        let mut v: Vec<(Conn, QueueSummary)> = m
            .into_iter()
            .filter(|(_, q)| q.reads > 0 && (q.rqueue_max > 0 || q.drained_bytes > 0))
            .collect();
        v.sort_by_key(|(c, _)| (c.local, c.lport, c.remote, c.rport));
        v
    }

    fn prune(&mut self, now: Instant) {
        self.closed
            .retain(|_, c| c.claimed || now.duration_since(c.at) < CLOSED_GRACE);
        if self.closed.len() > MAX_CLOSED {
            let mut unclaimed: Vec<(Instant, Conn)> = self
                .closed
                .iter()
                .filter(|(_, c)| !c.claimed)
                .map(|(k, c)| (c.at, *k))
                .collect();
            unclaimed.sort_by_key(|(at, _)| *at);
            let excess = self.closed.len() - MAX_CLOSED;
            for (_, k) in unclaimed.into_iter().take(excess) {
                self.closed.remove(&k);
                self.dropped += 1;
            }
        }
    }

    /// The receive queues as the recording keeps them: each keyed by the RX flow of the
    /// packets it receives (remote end the source).
    pub fn queue_stats(&self) -> Vec<crate::snapshot::SocketQueueStat> {
        self.queues()
            .into_iter()
            .map(|(c, q)| crate::snapshot::SocketQueueStat {
                key: FlowKey {
                    dir: Dir::Rx,
                    proto: "tcp".into(),
                    src: c.remote.to_string(),
                    sport: c.rport,
                    dst: c.local.to_string(),
                    dport: c.lport,
                },
                reads: q.reads,
                rqueue_sum: q.rqueue_sum,
                rqueue_max: q.rqueue_max,
                rmem_sum: q.rmem_sum,
                rcvbuf_max: q.rcvbuf_max,
                drained_bytes: q.drained_bytes,
                span_ns: q.span_ns,
            })
            .collect()
    }

    /// A four-tuple's counts over the run so far, open and closed connections together.
    pub fn counts(&self, conn: &Conn) -> Option<Counts> {
        let mut total = self.closed.get(conn).map(|c| c.counts);
        for o in self.open.values().filter(|o| o.conn == *conn) {
            total
                .get_or_insert_with(Counts::default)
                .add(o.now.since(o.base));
        }
        total
    }

    /// Put the socket counts in place of the estimates of the TCP flows they cover; returns
    /// those flows. A flow keeps its own header bytes per packet (frame less payload), from its
    /// samples, or the bare TCP header with timestamps if it has none.
    pub fn apply(&mut self, flows: &mut [SampledFlow]) -> HashSet<FlowKey> {
        let by_conn: HashMap<Conn, Counts> = {
            let mut m: HashMap<Conn, Counts> =
                self.closed.iter().map(|(k, c)| (*k, c.counts)).collect();
            for o in self.open.values() {
                m.entry(o.conn).or_default().add(o.now.since(o.base));
            }
            m
        };
        let mut applied = HashSet::new();
        for f in flows.iter_mut().filter(|f| f.key.proto == "tcp") {
            let Some(conn) = conn_of(&f.key) else {
                continue;
            };
            let Some(c) = by_conn.get(&conn) else {
                continue;
            };
            let (packets, payload) = match f.key.dir {
                Dir::Rx => (c.segs_in, c.bytes_in),
                Dir::Tx => (c.segs_out, c.bytes_out),
            };
            if packets == 0 {
                continue;
            }
            let header = if f.packets > 0 && f.bytes > f.payload_bytes {
                (f.bytes - f.payload_bytes) as f64 / f.packets as f64
            } else {
                default_header(&conn)
            };
            f.packets = packets;
            f.payload_bytes = payload;
            f.bytes = payload + (header * packets as f64).round() as u64;
            f.samples = packets;
            f.bytes_var = 0;
            if let Some(c) = self.closed.get_mut(&conn) {
                c.claimed = true;
            }
            applied.insert(f.key.clone());
        }
        applied
    }
}

/// An Ethernet frame's headers around a TCP segment with timestamps.
fn default_header(conn: &Conn) -> f64 {
    match conn.local {
        IpAddr::V4(_) => 14.0 + 20.0 + 32.0,
        IpAddr::V6(_) => 14.0 + 40.0 + 32.0,
    }
}

/// The connection a flow of this host's traffic belongs to: its local end is the packet's
/// destination on RX and its source on TX.
fn conn_of(k: &FlowKey) -> Option<Conn> {
    let src: IpAddr = k.src.parse().ok()?;
    let dst: IpAddr = k.dst.parse().ok()?;
    Some(match k.dir {
        Dir::Rx => Conn {
            local: dst,
            lport: k.dport,
            remote: src,
            rport: k.sport,
        },
        Dir::Tx => Conn {
            local: src,
            lport: k.sport,
            remote: dst,
            rport: k.dport,
        },
    })
}

/// The sock_diag sockets of one network namespace: a dump socket and one that hears the
/// TCP destroy notifications.
pub struct SocketFlows {
    dump: Netlink,
    destroys: Netlink,
    table: SocketTable,
    /// Reads whose notifications overflowed the socket's queue.
    pub overflows: u64,
}

impl SocketFlows {
    /// Open both sockets in the namespace at `netns` (None: this process's) and take the
    /// first read. Fails where the kernel has no sock_diag for TCP or refuses the
    /// notifications (they need CAP_NET_ADMIN).
    pub fn open(netns: Option<&Path>) -> Result<SocketFlows> {
        let destroys =
            Netlink::subscribe(NETLINK_SOCK_DIAG, netns, TCP_DESTROY_GROUPS, DESTROY_RCVBUF)?;
        let dump = Netlink::open(NETLINK_SOCK_DIAG, netns)?;
        let mut s = SocketFlows {
            dump,
            destroys,
            table: SocketTable::default(),
            overflows: 0,
        };
        s.read()?;
        Ok(s)
    }

    fn dump_family(&mut self, family: u8) -> Result<Vec<SocketStat>> {
        let mut req = vec![
            family,
            libc::IPPROTO_TCP as u8,
            (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_SKMEMINFO - 1)),
            0,
        ];
        req.extend_from_slice(&STATES.to_ne_bytes());
        req.extend_from_slice(&[0u8; 48]);
        let msgs = self
            .dump
            .request(SOCK_DIAG_BY_FAMILY, netlink::NLM_F_DUMP, &req)
            .map_err(|e| anyhow::anyhow!("listing TCP sockets (sock_diag): {e}"))?;
        Ok(msgs.iter().filter_map(|m| parse_diag(m)).collect())
    }

    /// Read the sockets and the notifications since the last read.
    pub fn read(&mut self) -> Result<()> {
        // Notifications first: a socket that closed after the dump is then still listed, and
        // its notification, read next time, ends it.
        let (msgs, overflowed) = self.destroys.drain();
        if overflowed {
            self.overflows += 1;
        }
        let destroyed: Vec<SocketStat> = msgs.iter().filter_map(|m| parse_diag(m)).collect();
        let mut listed = self.dump_family(libc::AF_INET as u8)?;
        listed.extend(self.dump_family(libc::AF_INET6 as u8)?);
        self.table.update(&listed, &destroyed, Instant::now());
        Ok(())
    }

    /// The last read of a run: a connection that closed just before it is no longer listed,
    /// and its notification follows once the kernel frees it (a work queue, after its last
    /// packets); wait up to `patience` for those, so its last counts are not an older dump's.
    pub fn read_last(&mut self, patience: Duration) -> Result<()> {
        self.read()?;
        let deadline = Instant::now() + patience;
        while self.table.awaiting() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            let (msgs, overflowed) = self.destroys.drain();
            if overflowed {
                self.overflows += 1;
            }
            let destroyed: Vec<SocketStat> = msgs.iter().filter_map(|m| parse_diag(m)).collect();
            self.table.ended(&destroyed, Instant::now());
        }
        Ok(())
    }

    pub fn table(&mut self) -> &mut SocketTable {
        &mut self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(lport: u16) -> Conn {
        Conn {
            local: "10.0.0.2".parse().unwrap(),
            lport,
            remote: "10.0.0.1".parse().unwrap(),
            rport: 5201,
        }
    }

    fn stat(cookie: u64, lport: u16, segs_in: u64, bytes_in: u64) -> SocketStat {
        SocketStat {
            cookie,
            conn: conn(lport),
            counts: Counts {
                segs_in,
                segs_out: segs_in / 2,
                bytes_in,
                bytes_out: 0,
            },
            queue: QueueSample::default(),
        }
    }

    fn flow(dir: Dir, lport: u16, packets: u64, bytes: u64, payload: u64) -> SampledFlow {
        let (src, sport, dst, dport) = match dir {
            Dir::Rx => ("10.0.0.1", 5201, "10.0.0.2", lport),
            Dir::Tx => ("10.0.0.2", lport, "10.0.0.1", 5201),
        };
        SampledFlow {
            key: FlowKey {
                dir,
                proto: "tcp".into(),
                src: src.into(),
                sport,
                dst: dst.into(),
                dport,
            },
            queue: 1,
            samples: 10,
            packets,
            bytes,
            payload_bytes: payload,
            bytes_var: 99,
            first_ns: 1,
            last_ns: 2,
        }
    }

    #[test]
    fn a_receive_queue_gives_its_mean_depth_and_drain_rate() {
        let t0 = Instant::now();
        let mut t = SocketTable::default();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let q = |bytes_in: u64, rqueue: u64| {
            let mut s = stat(1, 40000, bytes_in / 1000, bytes_in);
            s.queue = QueueSample {
                rqueue,
                rmem: Some(rqueue * 2),
                rcvbuf: Some(4 << 20),
            };
            s
        };
        // 10 MB arrive in a second while the queue grows from 1 to 3 MB: 8 MB were read.
        t.update(&[q(1_000_000, 1_000_000)], &[], at(0));
        t.update(&[q(6_000_000, 2_000_000)], &[], at(500));
        t.update(&[q(11_000_000, 3_000_000)], &[], at(1000));
        let v = t.queues();
        assert_eq!(v.len(), 1);
        let s = v[0].1;
        assert_eq!(
            (s.reads, s.rqueue_sum, s.rqueue_max),
            (3, 6_000_000, 3_000_000)
        );
        assert_eq!((s.drained_bytes, s.span_ns), (8_000_000, 1_000_000_000));
        assert_eq!((s.rmem_sum, s.rcvbuf_max), (12_000_000, 4 << 20));
        // It closes: its readings stay with its four-tuple.
        t.ended(&[q(11_000_000, 0)], at(1100));
        assert_eq!(t.queues()[0].1.drained_bytes, 8_000_000);
    }

    #[test]
    fn open_connections_count_from_the_first_read_and_new_ones_whole() {
        let t0 = Instant::now();
        let mut t = SocketTable::default();
        t.update(&[stat(1, 40000, 100, 100_000)], &[], t0);
        t.update(
            &[stat(1, 40000, 150, 160_000), stat(2, 40001, 7, 5_000)],
            &[],
            t0,
        );
        assert_eq!(
            t.counts(&conn(40000)).map(|c| (c.segs_in, c.bytes_in)),
            Some((50, 60_000))
        );
        assert_eq!(
            t.counts(&conn(40001)).map(|c| (c.segs_in, c.bytes_in)),
            Some((7, 5_000))
        );
        assert_eq!(t.counts(&conn(40002)), None);
    }

    #[test]
    fn a_connection_that_closes_between_reads_is_counted_whole_by_its_notification() {
        let t0 = Instant::now();
        let mut t = SocketTable::default();
        t.update(&[stat(1, 40000, 100, 100_000)], &[], t0);
        // 3 opened and closed between two reads; 1 closed with more than the last read saw.
        t.update(
            &[],
            &[stat(3, 40003, 20, 30_000), stat(1, 40000, 400, 700_000)],
            t0,
        );
        assert_eq!(t.counts(&conn(40003)).map(|c| c.bytes_in), Some(30_000));
        assert_eq!(t.counts(&conn(40000)).map(|c| c.bytes_in), Some(600_000));
        assert_eq!(t.unseen_ends, 0);
        // Its four-tuple used again: the connections add up.
        t.update(&[stat(4, 40000, 10, 1_000)], &[], t0);
        assert_eq!(t.counts(&conn(40000)).map(|c| c.bytes_in), Some(601_000));
    }

    #[test]
    fn a_late_notification_is_waited_for_once_and_a_missing_one_ends_at_the_last_read() {
        let t0 = Instant::now();
        let mut t = SocketTable::default();
        t.update(&[], &[], t0);
        t.update(&[stat(5, 40005, 10, 10_000)], &[], t0);
        // Gone from the dump, its notification not read yet: still open, and waited for.
        t.update(&[], &[], t0);
        assert_eq!(t.unseen_ends, 0);
        assert!(t.awaiting());
        t.ended(&[stat(5, 40005, 12, 12_000)], t0);
        assert!(!t.awaiting());
        assert_eq!(t.counts(&conn(40005)).map(|c| c.bytes_in), Some(12_000));
        // Another that never sends one: closed at what the last read saw, and said so.
        t.update(&[stat(6, 40006, 3, 3_000)], &[], t0);
        t.update(&[], &[], t0);
        t.update(&[], &[], t0);
        assert_eq!(t.unseen_ends, 1);
        assert_eq!(t.counts(&conn(40006)).map(|c| c.bytes_in), Some(3_000));
    }

    #[test]
    fn closed_connections_no_flow_claims_are_let_go_and_claimed_ones_kept() {
        let t0 = Instant::now();
        let mut t = SocketTable::default();
        t.update(&[], &[], t0);
        t.update(
            &[],
            &[stat(7, 40007, 5, 5_000), stat(8, 40008, 6, 6_000)],
            t0,
        );
        let mut flows = vec![flow(Dir::Rx, 40007, 4, 5_000, 4_000)];
        assert_eq!(t.apply(&mut flows).len(), 1);
        t.update(&[], &[], t0 + CLOSED_GRACE + Duration::from_secs(1));
        assert!(t.counts(&conn(40007)).is_some());
        assert!(t.counts(&conn(40008)).is_none());
    }

    #[test]
    fn flows_take_the_socket_counts_with_their_own_header_bytes() {
        let t0 = Instant::now();
        let mut t = SocketTable::default();
        t.update(&[], &[], t0);
        let s = SocketStat {
            cookie: 9,
            conn: conn(40009),
            counts: Counts {
                segs_in: 1000,
                segs_out: 40,
                bytes_in: 1_448_000,
                bytes_out: 0,
            },
            queue: QueueSample::default(),
        };
        t.update(&[s], &[], t0);
        // Estimates with 66 header bytes a packet; a UDP flow and a flow of another connection
        // keep theirs.
        let mut flows = vec![
            flow(Dir::Rx, 40009, 900, 900 * 1514, 900 * 1448),
            flow(Dir::Tx, 40009, 50, 50 * 66, 0),
            flow(Dir::Rx, 40010, 5, 500, 200),
            SampledFlow {
                key: FlowKey {
                    proto: "udp".into(),
                    ..flow(Dir::Rx, 40009, 1, 1, 1).key
                },
                ..flow(Dir::Rx, 40009, 3, 300, 100)
            },
        ];
        let exact = t.apply(&mut flows);
        assert_eq!(exact.len(), 2);
        assert_eq!(
            (flows[0].packets, flows[0].payload_bytes, flows[0].bytes),
            (1000, 1_448_000, 1_448_000 + 66_000)
        );
        assert_eq!(
            (flows[1].packets, flows[1].payload_bytes, flows[1].bytes),
            (40, 0, 40 * 66)
        );
        assert_eq!(flows[0].bytes_var, 0);
        assert_eq!((flows[2].packets, flows[3].packets), (5, 3));
    }

    /// A message as the kernel sends it: `inet_diag_msg`, then INET_DIAG_INFO with a
    /// `tcp_info` of `info_len` bytes.
    fn diag_msg(family: u8, local: &[u8], remote: &[u8], info_len: usize) -> Vec<u8> {
        let mut m = vec![0u8; DIAG_MSG_LEN];
        m[0] = family;
        m[4..6].copy_from_slice(&40000u16.to_be_bytes());
        m[6..8].copy_from_slice(&5201u16.to_be_bytes());
        m[8..8 + local.len()].copy_from_slice(local);
        m[24..24 + remote.len()].copy_from_slice(remote);
        m[44..48].copy_from_slice(&7u32.to_ne_bytes());
        m[48..52].copy_from_slice(&1u32.to_ne_bytes());
        let mut info = vec![0u8; 256];
        info[TCPI_BYTES_ACKED..TCPI_BYTES_ACKED + 8].copy_from_slice(&11u64.to_ne_bytes());
        info[TCPI_BYTES_RECEIVED..TCPI_BYTES_RECEIVED + 8].copy_from_slice(&22u64.to_ne_bytes());
        info[TCPI_SEGS_OUT..TCPI_SEGS_OUT + 4].copy_from_slice(&3u32.to_ne_bytes());
        info[TCPI_SEGS_IN..TCPI_SEGS_IN + 4].copy_from_slice(&4u32.to_ne_bytes());
        info[TCPI_BYTES_SENT..TCPI_BYTES_SENT + 8].copy_from_slice(&33u64.to_ne_bytes());
        info.truncate(info_len);
        m.extend(netlink::attr(INET_DIAG_INFO, &info));
        m
    }

    #[test]
    fn diag_messages_parse_with_mapped_addresses_and_older_kernels_tcp_info() {
        let s = parse_diag(&diag_msg(
            libc::AF_INET as u8,
            &[10, 0, 0, 2],
            &[10, 0, 0, 1],
            232,
        ))
        .unwrap();
        assert_eq!(s.cookie, 7 | 1 << 32);
        assert_eq!(s.conn, conn(40000));
        assert_eq!(
            s.counts,
            Counts {
                segs_in: 4,
                segs_out: 3,
                bytes_in: 22,
                bytes_out: 33
            }
        );
        let mapped = |a: [u8; 4]| [[0u8; 10].as_slice(), &[0xff, 0xff], &a].concat();
        let v6 = parse_diag(&diag_msg(
            libc::AF_INET6 as u8,
            &mapped([10, 0, 0, 2]),
            &mapped([10, 0, 0, 1]),
            232,
        ))
        .unwrap();
        assert_eq!(v6.conn, conn(40000));
        // A tcp_info from before bytes_sent: the bytes acknowledged.
        let old = parse_diag(&diag_msg(
            libc::AF_INET as u8,
            &[10, 0, 0, 2],
            &[10, 0, 0, 1],
            192,
        ))
        .unwrap();
        assert_eq!(old.counts.bytes_out, 11);
        // Too short to hold the segment counts, or no info at all: not a counted socket.
        assert!(parse_diag(&diag_msg(
            libc::AF_INET as u8,
            &[10, 0, 0, 2],
            &[10, 0, 0, 1],
            100
        ))
        .is_none());
        assert!(parse_diag(&[0u8; 40]).is_none());
    }

    /// Against the kernel: a loopback connection that carries a known number of bytes and
    /// closes between two reads is counted whole, from its close notification. Needs
    /// CAP_NET_ADMIN for the notifications: ignored (and counted so) by a plain `cargo test`,
    /// run as root by `make test`, where a refusal fails it.
    #[test]
    #[ignore = "needs CAP_NET_ADMIN (sock_diag close notifications): run as root with --include-ignored"]
    fn a_loopback_connection_is_counted_exactly_through_its_close() {
        use std::io::{Read, Write};
        let mut s = SocketFlows::open(None)
            .expect("sock_diag with close notifications (needs CAP_NET_ADMIN)");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let sent = vec![7u8; 300_000];
        client.write_all(&sent).unwrap();
        let mut got = vec![0u8; sent.len()];
        server.read_exact(&mut got).unwrap();
        s.read().unwrap();
        let server_end = Conn {
            local: "127.0.0.1".parse().unwrap(),
            lport: port,
            remote: "127.0.0.1".parse().unwrap(),
            rport: client.local_addr().unwrap().port(),
        };
        assert_eq!(
            s.table().counts(&server_end).map(|c| c.bytes_in),
            Some(300_000)
        );
        client.write_all(&[1u8; 1000]).unwrap();
        server.read_exact(&mut got[..1000]).unwrap();
        drop(client);
        drop(server);
        // The notification comes from a work queue once the socket is freed.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            s.read().unwrap();
            if s.table().open.values().all(|o| o.conn != server_end) || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The kernel counts the peer's FIN as one byte received.
        let bytes_in = s.table().counts(&server_end).map(|c| c.bytes_in);
        assert!(matches!(bytes_in, Some(301_000..=301_001)), "{bytes_in:?}");
        assert_eq!(s.table().unseen_ends, 0);
    }
}
