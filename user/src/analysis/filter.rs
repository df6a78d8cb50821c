//! What a report, `top` or `diff` shows of a recording: `--queue rx2`, `--dir rx|tx` and
//! `--flow EXPR`, a small expression in pcap-filter words (proto, host, net, port, src/dst,
//! and/or/not, parentheses). A filter selects rows of what the recording holds; it never
//! changes what the model and the attribution computed from the whole device (the DDIO
//! ways are shared by every queue), and it says what it left out.
//!
//! No crate parses pcap-filter syntax without compiling it to BPF through libpcap, which
//! matches packets, not the recording's flow rows: the grammar is small enough to parse here.
use std::net::IpAddr;
use std::str::FromStr;

use serde::Serialize;

use crate::snapshot::Dir;

/// `--queue`, `--flow`, `--dir`: on `report`, `top` and `diff`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FilterArgs {
    /// Only these queues: rx2, tx0, or a bare number for both directions; comma-separated
    /// or repeated (--queue rx0,rx2).
    #[arg(long = "queue", value_name = "QUEUE", value_delimiter = ',', value_parser = QueueSel::from_str)]
    pub queues: Vec<QueueSel>,
    /// Only flows matching EXPR, in pcap-filter words: tcp, udp, ip, ip6, [src|dst] host
    /// ADDR, [src|dst] net ADDR/LEN, [src|dst] port N, portrange A-B, and/or/not,
    /// parentheses (e.g. 'tcp and port 5201', 'not src net 10.0.0.0/8').
    #[arg(long, value_name = "EXPR", value_parser = FlowExpr::from_str)]
    pub flow: Option<FlowExpr>,
    /// Only one direction.
    #[arg(long, value_enum)]
    pub dir: Option<DirArg>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DirArg {
    Rx,
    Tx,
}

impl DirArg {
    pub fn dir(self) -> Dir {
        match self {
            DirArg::Rx => Dir::Rx,
            DirArg::Tx => Dir::Tx,
        }
    }
}

/// One `--queue` value: a queue of one direction, or of both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSel {
    pub dir: Option<Dir>,
    pub queue: u32,
}

impl FromStr for QueueSel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        let (dir, num) = if let Some(n) = t.strip_prefix("rx") {
            (Some(Dir::Rx), n)
        } else if let Some(n) = t.strip_prefix("tx") {
            (Some(Dir::Tx), n)
        } else {
            (None, t.as_str())
        };
        let num = num.trim_start_matches([' ', '-', '_']);
        match num.parse::<u32>() {
            Ok(queue) => Ok(QueueSel { dir, queue }),
            Err(_) => Err(format!(
                "'{s}' is not a queue: write rx2, tx0, or 2 for both directions"
            )),
        }
    }
}

impl std::fmt::Display for QueueSel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.dir {
            Some(d) => write!(f, "{d}{}", self.queue),
            None => write!(f, "{}", self.queue),
        }
    }
}

/// Which end of a flow an address or port term looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Either,
    Src,
    Dst,
}

#[derive(Debug, Clone, PartialEq)]
enum Term {
    /// A transport protocol as the recording names it (`tcp`, `udp`).
    Proto(String),
    /// The address family: 4 (`ip`) or 6 (`ip6`).
    Family(u8),
    Host(Side, IpAddr),
    Net(Side, IpAddr, u8),
    Port(Side, u16, u16),
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Term(Term),
    Not(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
}

/// A parsed `--flow` expression, with the text it was parsed from.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowExpr {
    text: String,
    root: Node,
}

/// The parts of a flow a filter looks at.
#[derive(Debug, Clone, Copy)]
pub struct FlowView<'a> {
    pub proto: &'a str,
    pub src: &'a str,
    pub sport: u16,
    pub dst: &'a str,
    pub dport: u16,
}

impl FromStr for FlowExpr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let tokens = tokenize(s);
        if tokens.is_empty() {
            return Err("empty flow expression (e.g. 'tcp and port 5201')".into());
        }
        let mut p = Parser { t: &tokens, i: 0 };
        let root = p.or()?;
        if let Some(extra) = p.peek() {
            return Err(format!(
                "unexpected '{extra}' after a complete expression (join terms with and/or)"
            ));
        }
        Ok(FlowExpr {
            text: s.trim().to_string(),
            root,
        })
    }
}

impl std::fmt::Display for FlowExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        if !cur.is_empty() {
            out.push(std::mem::take(cur));
        }
    };
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
        if c.is_whitespace() {
            flush(&mut cur, &mut out);
        } else if two == "&&" || two == "||" {
            flush(&mut cur, &mut out);
            out.push(two);
            i += 1;
        } else if c == '(' || c == ')' || (c == '!' && cur.is_empty()) {
            flush(&mut cur, &mut out);
            out.push(c.to_string());
        } else {
            cur.push(c);
        }
        i += 1;
    }
    flush(&mut cur, &mut out);
    out
}

struct Parser<'a> {
    t: &'a [String],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.t.get(self.i).map(String::as_str)
    }
    fn next(&mut self) -> Option<&str> {
        let t = self.t.get(self.i).map(String::as_str);
        self.i += 1;
        t
    }
    fn word(&self) -> Option<String> {
        self.peek().map(str::to_ascii_lowercase)
    }

    fn or(&mut self) -> Result<Node, String> {
        let mut n = self.and()?;
        while matches!(self.word().as_deref(), Some("or" | "||")) {
            self.i += 1;
            n = Node::Or(Box::new(n), Box::new(self.and()?));
        }
        Ok(n)
    }

    fn and(&mut self) -> Result<Node, String> {
        let mut n = self.unary()?;
        while matches!(self.word().as_deref(), Some("and" | "&&")) {
            self.i += 1;
            n = Node::And(Box::new(n), Box::new(self.unary()?));
        }
        Ok(n)
    }

    fn unary(&mut self) -> Result<Node, String> {
        match self.word().as_deref() {
            Some("not" | "!") => {
                self.i += 1;
                Ok(Node::Not(Box::new(self.unary()?)))
            }
            Some("(") => {
                self.i += 1;
                let n = self.or()?;
                match self.next() {
                    Some(")") => Ok(n),
                    Some(x) => Err(format!("expected ')', found '{x}'")),
                    None => Err("a '(' is not closed".into()),
                }
            }
            _ => self.term().map(Node::Term),
        }
    }

    fn term(&mut self) -> Result<Term, String> {
        let Some(w) = self.word() else {
            return Err("the expression ends where a term was expected".into());
        };
        self.i += 1;
        let side = match w.as_str() {
            "tcp" | "udp" | "sctp" | "icmp" | "icmp6" => return Ok(Term::Proto(w)),
            "ip" => return Ok(Term::Family(4)),
            "ip6" => return Ok(Term::Family(6)),
            "src" => Side::Src,
            "dst" => Side::Dst,
            "host" | "net" | "port" | "portrange" => {
                self.i -= 1;
                Side::Either
            }
            ")" | "and" | "or" | "&&" | "||" => {
                return Err(format!("'{w}' where a term was expected"))
            }
            _ => {
                return Err(format!(
                "'{w}' is not a filter term (tcp, udp, ip, ip6, [src|dst] host/net/port/portrange)"
            ))
            }
        };
        // `src ADDR` is `src host ADDR`, as in pcap-filter.
        let kind = match self.word().as_deref() {
            Some(k @ ("host" | "net" | "port" | "portrange")) => {
                let k = k.to_string();
                self.i += 1;
                k
            }
            _ => "host".to_string(),
        };
        let Some(v) = self.next().map(str::to_string) else {
            return Err(format!("'{kind}' needs a value"));
        };
        match kind.as_str() {
            "host" => v
                .parse::<IpAddr>()
                .map(|a| Term::Host(side, a))
                .map_err(|_| {
                    format!("'{v}' is not an IP address (host takes one; names are not resolved)")
                }),
            "net" => {
                let (a, len) = v.split_once('/').unwrap_or((v.as_str(), ""));
                let addr: IpAddr = a.parse().map_err(|_| {
                    format!("'{v}' is not a network (write ADDR/LEN, e.g. 10.0.0.0/8)")
                })?;
                let max = if addr.is_ipv4() { 32 } else { 128 };
                let len: u8 = if len.is_empty() {
                    max
                } else {
                    len.parse()
                        .ok()
                        .filter(|l| *l <= max)
                        .ok_or_else(|| format!("'{v}': the prefix length must be 0 to {max}"))?
                };
                Ok(Term::Net(side, addr, len))
            }
            "port" => v
                .parse::<u16>()
                .map(|p| Term::Port(side, p, p))
                .map_err(|_| format!("'{v}' is not a port number (0 to 65535)")),
            _ => {
                let bad = || format!("'{v}' is not a port range (write A-B, e.g. 5201-5210)");
                let (a, b) = v.split_once('-').ok_or_else(bad)?;
                let (a, b): (u16, u16) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                Ok(Term::Port(side, a, b))
            }
        }
    }
}

fn in_net(addr: IpAddr, net: IpAddr, len: u8) -> bool {
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

impl Term {
    fn matches(&self, f: &FlowView<'_>) -> bool {
        let addrs = |side: Side| -> Vec<Option<IpAddr>> {
            let (s, d) = (f.src.parse().ok(), f.dst.parse().ok());
            match side {
                Side::Either => vec![s, d],
                Side::Src => vec![s],
                Side::Dst => vec![d],
            }
        };
        let ports = |side: Side| match side {
            Side::Either => vec![f.sport, f.dport],
            Side::Src => vec![f.sport],
            Side::Dst => vec![f.dport],
        };
        match self {
            Term::Proto(p) => f.proto.eq_ignore_ascii_case(p),
            Term::Family(v) => {
                let a: Option<IpAddr> = f.src.parse().ok();
                a.is_some_and(|a| if *v == 4 { a.is_ipv4() } else { a.is_ipv6() })
            }
            Term::Host(side, h) => addrs(*side).into_iter().flatten().any(|a| a == *h),
            Term::Net(side, n, len) => addrs(*side)
                .into_iter()
                .flatten()
                .any(|a| in_net(a, *n, *len)),
            Term::Port(side, lo, hi) => ports(*side).iter().any(|p| (lo..=hi).contains(&p)),
        }
    }
}

impl Node {
    fn matches(&self, f: &FlowView<'_>) -> bool {
        match self {
            Node::Term(t) => t.matches(f),
            Node::Not(n) => !n.matches(f),
            Node::And(a, b) => a.matches(f) && b.matches(f),
            Node::Or(a, b) => a.matches(f) || b.matches(f),
        }
    }
}

impl FlowExpr {
    pub fn matches(&self, f: &FlowView<'_>) -> bool {
        self.root.matches(f)
    }
}

/// The filter of one command, from its flags.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub queues: Vec<QueueSel>,
    pub dir: Option<Dir>,
    pub flow: Option<FlowExpr>,
}

impl From<&FilterArgs> for Filter {
    fn from(a: &FilterArgs) -> Filter {
        Filter {
            queues: a.queues.clone(),
            dir: a.dir.map(DirArg::dir),
            flow: a.flow.clone(),
        }
    }
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty() && self.dir.is_none() && self.flow.is_none()
    }

    /// Selects queues (by --queue and --dir): a flow expression alone selects every queue.
    pub fn selects_queues(&self) -> bool {
        !self.queues.is_empty() || self.dir.is_some()
    }

    pub fn queue(&self, dir: Dir, queue: u32) -> bool {
        self.dir.is_none_or(|d| d == dir)
            && (self.queues.is_empty()
                || self
                    .queues
                    .iter()
                    .any(|s| s.queue == queue && s.dir.is_none_or(|d| d == dir)))
    }

    /// A flow of direction `dir` seen on `queue` (None: the queue is not known).
    pub fn flow(&self, dir: Dir, queue: Option<u32>, f: &FlowView<'_>) -> bool {
        let q = match queue {
            Some(q) => self.queue(dir, q),
            None => self.dir.is_none_or(|d| d == dir) && self.queues.is_empty(),
        };
        q && self.flow.as_ref().is_none_or(|e| e.matches(f))
    }

    /// The flags as they would be typed again.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.queues.is_empty() {
            let q: Vec<String> = self.queues.iter().map(ToString::to_string).collect();
            parts.push(format!("--queue {}", q.join(",")));
        }
        if let Some(d) = self.dir {
            parts.push(format!("--dir {d}"));
        }
        if let Some(e) = &self.flow {
            parts.push(format!("--flow '{e}'"));
        }
        parts.join(" ")
    }
}

/// What a filter left out of a report: counted over what the recording holds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Excluded {
    /// The flags, as typed.
    pub filter: String,
    pub queues: Vec<String>,
    pub queue_packets: u64,
    pub queue_bytes: u64,
    pub flows: u64,
    pub flow_bytes: u64,
    /// What the filter does not apply to, in words.
    pub notes: Vec<String>,
}

impl Excluded {
    /// One line for text reports.
    pub fn line(&self) -> String {
        let mut s = format!("filter {}: left out ", self.filter);
        let mut parts = Vec::new();
        if !self.queues.is_empty() {
            parts.push(format!(
                "{} queue{} ({}; {} packets, {} bytes)",
                self.queues.len(),
                if self.queues.len() == 1 { "" } else { "s" },
                self.queues.join(", "),
                self.queue_packets,
                self.queue_bytes
            ));
        }
        parts.push(format!(
            "{} flow{} ({} bytes)",
            self.flows,
            if self.flows == 1 { "" } else { "s" },
            self.flow_bytes
        ));
        s += &parts.join(" and ");
        s
    }
}

/// The notes every filtered report carries: what the recording does not hold per flow or
/// per queue, so the filter cannot select it.
pub fn standard_notes(f: &Filter) -> Vec<String> {
    let mut n = Vec::new();
    if f.flow.is_some() {
        n.push("queue rows count whole queues: the recorder counts queues, not flows within them, so --flow selects flow rows only".to_string());
    }
    n.push("drops by kernel reason and the socket's DDIO counters are the whole device's: no filter applies to them".to_string());
    n.push("the model's verdicts and the attribution's shares are computed over every queue (the DDIO ways are shared); the filter only hides rows".to_string());
    n
}

/// Hide what the filter leaves out of a report's summary and advice, and say what that was.
pub fn apply(
    f: &Filter,
    s: &mut super::Summary,
    outcome: Option<&mut super::Outcome>,
) -> Option<Excluded> {
    if f.is_empty() {
        return None;
    }
    let mut ex = Excluded {
        filter: f.describe(),
        notes: standard_notes(f),
        ..Default::default()
    };
    s.queues.retain(|q| {
        let keep = f.queue(q.dir, q.queue);
        if !keep {
            ex.queues.push(format!("{} {}", q.dir, q.queue));
            ex.queue_packets += q.packets;
            ex.queue_bytes += q.bytes;
        }
        keep
    });
    s.totals.retain(|q| f.queue(q.dir, q.queue));
    s.flows.retain(|fl| {
        let view = FlowView {
            proto: &fl.proto,
            src: &fl.src,
            sport: fl.sport,
            dst: &fl.dst,
            dport: fl.dport,
        };
        let keep = f.flow(fl.dir, fl.rx_queue.or(fl.tx_queue), &view);
        if !keep {
            ex.flows += 1;
            ex.flow_bytes += fl.bytes;
        }
        keep
    });
    s.l3miss.queues.retain(|q| f.queue(q.dir, q.queue));
    s.l3miss.flows.retain(|fl| {
        let view = FlowView {
            proto: &fl.proto,
            src: &fl.src,
            sport: fl.sport,
            dst: &fl.dst,
            dport: fl.dport,
        };
        // Miss flows carry no queue: kept by direction and expression only.
        f.dir.is_none_or(|d| d == fl.dir) && f.flow.as_ref().is_none_or(|e| e.matches(&view))
    });
    if let Some(o) = outcome {
        let attribution = match o {
            super::Outcome::Advised(a) => {
                a.verdicts.retain(|v| f.queue(v.dir, v.queue));
                &mut a.attribution
            }
            super::Outcome::NoModel { attribution, .. } => attribution,
        };
        let keep_q = |q: &crate::attribution::QueueShare| {
            Dir::parse(&q.dir).is_none_or(|d| f.queue(d, q.queue))
        };
        let keep_f = |fl: &crate::attribution::FlowShare| {
            f.flow.as_ref().is_none_or(|e| {
                e.matches(&FlowView {
                    proto: &fl.proto,
                    src: &fl.src,
                    sport: fl.sport,
                    dst: &fl.dst,
                    dport: fl.dport,
                })
            }) && f.dir.is_none_or(|d| d == Dir::Rx)
        };
        for a in std::iter::once(&mut attribution.chosen).chain(attribution.all.iter_mut()) {
            a.queues.retain(keep_q);
            a.flows.retain(keep_f);
        }
    }
    s.filter = Some(ex.clone());
    Some(ex)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow<'a>(
        proto: &'a str,
        src: &'a str,
        sport: u16,
        dst: &'a str,
        dport: u16,
    ) -> FlowView<'a> {
        FlowView {
            proto,
            src,
            sport,
            dst,
            dport,
        }
    }

    fn m(expr: &str, f: &FlowView<'_>) -> bool {
        expr.parse::<FlowExpr>()
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .matches(f)
    }

    #[test]
    fn terms_match_as_pcap_filter_says() {
        let f = flow("tcp", "10.77.0.1", 46096, "10.77.0.2", 5201);
        assert!(m("tcp", &f));
        assert!(!m("udp", &f));
        assert!(m("TCP and port 5201", &f));
        assert!(m("port 46096", &f));
        assert!(m("dst port 5201", &f));
        assert!(!m("src port 5201", &f));
        assert!(m("src host 10.77.0.1", &f));
        assert!(m("src 10.77.0.1", &f));
        assert!(!m("dst 10.77.0.1", &f));
        assert!(m("host 10.77.0.2", &f));
        assert!(m("net 10.77.0.0/16", &f));
        assert!(!m("src net 10.78.0.0/16", &f));
        assert!(m("net 0.0.0.0/0", &f));
        assert!(m("portrange 5200-5210", &f));
        assert!(!m("dst portrange 1-1024", &f));
        assert!(m("ip", &f));
        assert!(!m("ip6", &f));
        let v6 = flow("udp", "fd77::1", 53, "fd77::2", 4000);
        assert!(m("ip6 and udp and src net fd77::/64", &v6));
        assert!(!m("net 10.0.0.0/8", &v6));
    }

    #[test]
    fn precedence_and_grouping() {
        let f = flow("udp", "10.0.0.1", 1, "10.0.0.2", 53);
        // and binds tighter than or.
        assert!(m("tcp and port 5201 or udp", &f));
        assert!(!m("tcp and (port 5201 or udp)", &f));
        assert!(m("not tcp", &f));
        assert!(m("! tcp && !port 80", &f));
        assert!(!m("not (udp or tcp)", &f));
        assert!(m("not not udp", &f));
        assert!(m("(udp)||tcp", &f));
    }

    #[test]
    fn bad_expressions_say_what_is_wrong_in_one_line() {
        for (e, says) in [
            ("", "empty"),
            ("tcp and", "ends where a term"),
            ("port", "needs a value"),
            ("port http", "not a port number"),
            ("port 70000", "not a port number"),
            ("host example.com", "not an IP address"),
            ("net 10.0.0.0/33", "prefix length"),
            ("portrange 10-5", "not a port range"),
            ("(tcp", "not closed"),
            ("tcp udp", "unexpected 'udp'"),
            ("tcp and or udp", "'or' where a term"),
            ("frobnicate", "not a filter term"),
        ] {
            let err = e.parse::<FlowExpr>().expect_err(e);
            assert!(err.contains(says), "{e}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn queues_and_directions() {
        let q: QueueSel = "rx2".parse().unwrap_or_else(|e: String| panic!("{e}"));
        assert_eq!(
            q,
            QueueSel {
                dir: Some(Dir::Rx),
                queue: 2
            }
        );
        assert_eq!(
            "TX0".parse::<QueueSel>(),
            Ok(QueueSel {
                dir: Some(Dir::Tx),
                queue: 0
            })
        );
        assert_eq!(
            "3".parse::<QueueSel>(),
            Ok(QueueSel {
                dir: None,
                queue: 3
            })
        );
        assert!("rxx".parse::<QueueSel>().is_err());
        let f = Filter {
            queues: vec![
                q,
                QueueSel {
                    dir: None,
                    queue: 3,
                },
            ],
            dir: None,
            flow: None,
        };
        assert!(f.queue(Dir::Rx, 2) && !f.queue(Dir::Tx, 2));
        assert!(f.queue(Dir::Rx, 3) && f.queue(Dir::Tx, 3));
        assert!(!f.queue(Dir::Rx, 0));
        let f = Filter {
            dir: Some(Dir::Tx),
            ..f
        };
        assert!(!f.queue(Dir::Rx, 3) && f.queue(Dir::Tx, 3));
        assert_eq!(f.describe(), "--queue rx2,3 --dir tx");
        let any = Filter::default();
        assert!(any.is_empty() && any.queue(Dir::Tx, 9));
        // A flow on an unknown queue passes a flow-only filter, not a queue filter.
        let fl = flow("tcp", "1.2.3.4", 1, "5.6.7.8", 2);
        let by_flow = Filter {
            flow: Some("tcp".parse().unwrap_or_else(|e: String| panic!("{e}"))),
            ..Default::default()
        };
        assert!(by_flow.flow(Dir::Rx, None, &fl));
        assert!(!f.flow(Dir::Tx, None, &fl));
    }
}
