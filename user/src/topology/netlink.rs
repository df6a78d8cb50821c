//! A small netlink client: a socket opened in a given network namespace (it keeps that
//! namespace for its life), requests, multi-part dumps, and attribute walks. Used for the
//! questions only the kernel's netlink families answer: whether a link still exists
//! (rtnetlink) and the netdev family's per-queue and page_pool statistics.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use anyhow::{bail, Context, Result};

pub const NLMSG_HDR: usize = 16;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLM_F_REQUEST: u16 = 1;
pub const NLM_F_DUMP: u16 = 0x300;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;

/// The errno an NLMSG_ERROR or NLMSG_DONE message carries (0: none). A dump the kernel could
/// not make (a driver that keeps no such statistics) ends in a DONE that says why, as iproute2
/// reads it: taken for an empty answer, a refusal would be asked again at every read.
fn carried_errno(msg: &[u8]) -> i32 {
    msg.get(NLMSG_HDR..NLMSG_HDR + 4)
        .map_or(0, |e| -i32::from_ne_bytes([e[0], e[1], e[2], e[3]]))
}

pub struct Netlink {
    sock: OwnedFd,
    seq: u32,
}

/// One attribute (type without the nested/byte-order flags, payload).
pub fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            break;
        }
        out.push((kind, &b[4..len]));
        let step = ((len + 3) & !3).min(b.len());
        b = &b[step..];
    }
    out
}

/// An attribute as an unsigned number (u8/u16/u32/u64 by its length).
pub fn uint(v: &[u8]) -> Option<u64> {
    match v.len() {
        1 => Some(u64::from(v[0])),
        2 => Some(u64::from(u16::from_ne_bytes([v[0], v[1]]))),
        4 => Some(u64::from(u32::from_ne_bytes(v.try_into().ok()?))),
        8 => Some(u64::from_ne_bytes(v.try_into().ok()?)),
        _ => None,
    }
}

/// One attribute, encoded (padded to 4 bytes).
pub fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
    let len = 4 + payload.len();
    let mut a = Vec::with_capacity((len + 3) & !3);
    a.extend_from_slice(&(len as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(payload);
    a.resize((len + 3) & !3, 0);
    a
}

impl Netlink {
    /// A socket of `protocol` (NETLINK_ROUTE, NETLINK_GENERIC) in the namespace at `netns`
    /// (None: this process's), with a receive timeout so a reply that never comes cannot
    /// stall the caller.
    pub fn open(protocol: i32, netns: Option<&Path>) -> Result<Netlink> {
        let file = match netns {
            Some(p) => Some(
                std::fs::File::open(p)
                    .with_context(|| format!("opening network namespace {}", p.display()))?,
            ),
            None => None,
        };
        let fd = file.as_ref().map(|f| f.as_raw_fd());
        let sock = std::thread::scope(|s| {
            s.spawn(move || -> Result<OwnedFd> {
                if let Some(fd) = fd {
                    // SAFETY: fd is an open nsfs file; setns affects this thread only.
                    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                        bail!(
                            "entering the network namespace: {}",
                            std::io::Error::last_os_error()
                        );
                    }
                }
                // SAFETY: plain socket creation; the fd is owned right after.
                let raw = unsafe {
                    libc::socket(
                        libc::AF_NETLINK,
                        libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                        protocol,
                    )
                };
                if raw < 0 {
                    bail!(
                        "opening a netlink socket: {}",
                        std::io::Error::last_os_error()
                    );
                }
                // SAFETY: raw is a socket this thread just created.
                Ok(unsafe { OwnedFd::from_raw_fd(raw) })
            })
            .join()
            .map_err(|_| anyhow::anyhow!("netlink thread panicked"))?
        })?;
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: a valid socket and a timeval of the size given.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        Ok(Netlink { sock, seq: 0 })
    }

    /// A socket like `open`'s that also listens to the multicast `groups` (a bitmask, group n
    /// at bit n - 1), with a receive buffer of at least `rcvbuf` bytes where the kernel allows.
    pub fn subscribe(
        protocol: i32,
        netns: Option<&Path>,
        groups: u32,
        rcvbuf: usize,
    ) -> Result<Netlink> {
        let nl = Netlink::open(protocol, netns)?;
        // SAFETY: sockaddr_nl is plain data; zero is a valid value for every field.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = groups;
        // SAFETY: a valid socket and an address of the size given.
        let bound = unsafe {
            libc::bind(
                nl.sock.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if bound != 0 {
            bail!(
                "listening to netlink groups {groups:#x}: {}",
                std::io::Error::last_os_error()
            );
        }
        let size = rcvbuf as libc::c_int;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            // SAFETY: a valid socket and an int option of the size given.
            let set = unsafe {
                libc::setsockopt(
                    nl.sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as u32,
                )
            };
            if set == 0 {
                break;
            }
        }
        Ok(nl)
    }

    /// The messages already queued on a subscribed socket (bodies after the header), without
    /// waiting, and whether the kernel dropped some because the queue was full.
    pub fn drain(&mut self) -> (Vec<Vec<u8>>, bool) {
        let mut out = Vec::new();
        let mut overflowed = false;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: a valid socket and a buffer of the length given.
            let n = unsafe {
                libc::recv(
                    self.sock.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                match std::io::Error::last_os_error().raw_os_error() {
                    Some(libc::ENOBUFS) => {
                        overflowed = true;
                        continue;
                    }
                    Some(libc::EINTR) => continue,
                    _ => return (out, overflowed),
                }
            }
            let mut b = &buf[..n as usize];
            while b.len() >= NLMSG_HDR {
                let len = (u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    .clamp(NLMSG_HDR, b.len());
                let t = u16::from_ne_bytes([b[4], b[5]]);
                if t != NLMSG_DONE && t != NLMSG_ERROR {
                    out.push(b[NLMSG_HDR..len].to_vec());
                }
                b = &b[((len + 3) & !3).min(b.len())..];
            }
        }
    }

    /// Send one message (`kind`, `flags`, body after the header) and collect the replies to
    /// it: every message of a dump up to its DONE, or the single answer. An error reply
    /// becomes an io::Error with its errno.
    pub fn request(&mut self, kind: u16, flags: u16, body: &[u8]) -> std::io::Result<Vec<Vec<u8>>> {
        self.seq = self.seq.wrapping_add(1);
        let mut m = Vec::with_capacity(NLMSG_HDR + body.len());
        m.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        m.extend_from_slice(&self.seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        // SAFETY: a valid socket and a buffer of the length given.
        if unsafe { libc::send(self.sock.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: a valid socket and a buffer of the length given.
            let n =
                unsafe { libc::recv(self.sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut b = &buf[..n as usize];
            while b.len() >= NLMSG_HDR {
                let len = (u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    .clamp(NLMSG_HDR, b.len());
                let t = u16::from_ne_bytes([b[4], b[5]]);
                let seq = u32::from_ne_bytes([b[8], b[9], b[10], b[11]]);
                let msg = &b[..len];
                b = &b[((len + 3) & !3).min(b.len())..];
                // A late answer to an earlier request (one that timed out) is not ours.
                if seq != self.seq {
                    continue;
                }
                match t {
                    NLMSG_DONE | NLMSG_ERROR => {
                        return match carried_errno(msg) {
                            0 => Ok(out),
                            errno => Err(std::io::Error::from_raw_os_error(errno)),
                        };
                    }
                    _ => {
                        out.push(msg[NLMSG_HDR..].to_vec());
                        if !dump {
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }

    /// The id of a generic netlink family (None: the kernel has no such family).
    pub fn genl_family(&mut self, name: &str) -> Result<Option<u16>> {
        let mut body = vec![CTRL_CMD_GETFAMILY, 1, 0, 0];
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        body.extend(attr(CTRL_ATTR_FAMILY_NAME, &n));
        match self.request(GENL_ID_CTRL, 0, &body) {
            Ok(msgs) => Ok(msgs
                .first()
                .and_then(|m| {
                    attrs(m.get(4..)?)
                        .into_iter()
                        .find(|(k, _)| *k == CTRL_ATTR_FAMILY_ID)
                })
                .and_then(|(_, v)| uint(v))
                .map(|v| v as u16)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(anyhow::anyhow!("asking netlink for the {name} family: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_with_padding_and_flags() {
        let mut b = attr(3, &7u32.to_ne_bytes());
        b.extend(attr(9, &[1, 2, 3]));
        // The nested flag (bit 15) is not part of the type.
        b.extend(attr(0x8000 | 5, &42u64.to_ne_bytes()));
        let a = attrs(&b);
        assert_eq!(a.len(), 3);
        assert_eq!((a[0].0, uint(a[0].1)), (3, Some(7)));
        assert_eq!((a[1].0, a[1].1), (9, &[1u8, 2, 3][..]));
        assert_eq!((a[2].0, uint(a[2].1)), (5, Some(42)));
        // A length past the end stops the walk rather than reading beyond it.
        let mut bad = attr(1, &[0; 4]);
        bad[0] = 200;
        assert!(attrs(&bad).is_empty());
        assert_eq!(uint(&[1, 2, 3]), None);
    }

    #[test]
    fn a_dump_that_ends_in_an_error_is_an_error() {
        let msg = |payload: &[u8]| {
            let mut m = vec![0u8; NLMSG_HDR];
            m[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
            m.extend_from_slice(payload);
            m
        };
        // What the netdev family's qstats dump ends in for a device without queue stats.
        assert_eq!(
            carried_errno(&msg(&(-libc::EOPNOTSUPP).to_ne_bytes())),
            libc::EOPNOTSUPP
        );
        assert_eq!(carried_errno(&msg(&0i32.to_ne_bytes())), 0);
        // A DONE without a payload (older kernels) ends a dump that went well.
        assert_eq!(carried_errno(&msg(&[])), 0);
    }
}
