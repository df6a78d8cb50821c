//! Whether the observed interface still exists: its network namespace still named as it was,
//! and its ifindex still the device of that name there. Asked once an interval through a
//! netlink socket opened inside the namespace (a socket keeps the namespace it was made in),
//! so a deleted device or namespace is noticed within an interval, at the cost of one
//! RTM_GETLINK round trip.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::IfaceInfo;

/// What became of the interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    Present,
    /// Gone, and why, in words ("interface ddrcv was removed").
    Gone(String),
}

pub struct DeviceWatch {
    sock: OwnedFd,
    name: String,
    ifindex: u32,
    netns: Option<(String, PathBuf, u32)>,
    seq: u32,
}

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const NLMSG_HDR: usize = 16;
const IFINFOMSG: usize = 16;

/// An RTM_GETLINK request for one ifindex.
fn getlink_request(ifindex: u32, seq: u32) -> [u8; NLMSG_HDR + IFINFOMSG] {
    let mut m = [0u8; NLMSG_HDR + IFINFOMSG];
    m[0..4].copy_from_slice(&((NLMSG_HDR + IFINFOMSG) as u32).to_ne_bytes());
    m[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
    m[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    // ifinfomsg: family AF_UNSPEC, pad, type, then the index.
    m[NLMSG_HDR + 4..NLMSG_HDR + 8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    m
}

/// What a reply to `getlink_request` says: Some(name) for a link, None for "no such
/// device"; an error for anything else (a reply that is not netlink's).
pub fn parse_getlink_reply(reply: &[u8]) -> Result<Option<String>> {
    if reply.len() < NLMSG_HDR {
        bail!("short netlink reply ({} bytes)", reply.len());
    }
    let len = (u32::from_ne_bytes(reply[0..4].try_into()?) as usize).min(reply.len());
    let kind = u16::from_ne_bytes(reply[4..6].try_into()?);
    match kind {
        NLMSG_ERROR => {
            let err = reply.get(NLMSG_HDR..NLMSG_HDR + 4).context("short netlink error")?;
            let errno = -i32::from_ne_bytes(err.try_into()?);
            if errno == libc::ENODEV {
                Ok(None)
            } else {
                bail!("netlink error {errno} asking for the interface")
            }
        }
        RTM_NEWLINK => {
            let mut at = NLMSG_HDR + IFINFOMSG;
            while at + 4 <= len {
                let alen = u16::from_ne_bytes(reply[at..at + 2].try_into()?) as usize;
                let atype = u16::from_ne_bytes(reply[at + 2..at + 4].try_into()?) & 0x3fff;
                if alen < 4 || at + alen > len {
                    break;
                }
                if atype == IFLA_IFNAME {
                    let v = &reply[at + 4..at + alen];
                    let v = v.split(|&b| b == 0).next().unwrap_or(v);
                    return Ok(Some(String::from_utf8_lossy(v).into_owned()));
                }
                at += (alen + 3) & !3;
            }
            Ok(Some(String::new()))
        }
        other => bail!("unexpected netlink message type {other}"),
    }
}

impl DeviceWatch {
    /// Watch `iface` (resolved with `resolve_iface_live`, in its namespace if it has one).
    pub fn open(iface: &IfaceInfo) -> Result<DeviceWatch> {
        let netns = match &iface.netns {
            Some(n) => {
                let path = std::path::Path::new(super::NETNS_RUN_DIR).join(n);
                Some((n.clone(), path, iface.netns_inode))
            }
            None => None,
        };
        let file = match &netns {
            Some((n, p, _)) => Some(std::fs::File::open(p).with_context(|| format!("opening network namespace '{n}'"))?),
            None => None,
        };
        let fd = file.as_ref().map(|f| f.as_raw_fd());
        let sock = std::thread::scope(|s| {
            s.spawn(move || -> Result<OwnedFd> {
                if let Some(fd) = fd {
                    // SAFETY: fd is an open nsfs file; setns affects this thread only.
                    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                        bail!("entering the network namespace: {}", std::io::Error::last_os_error());
                    }
                }
                // SAFETY: plain socket creation; the fd is owned right after.
                let raw = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
                if raw < 0 {
                    bail!("opening a netlink socket: {}", std::io::Error::last_os_error());
                }
                // SAFETY: raw is a socket this thread just created.
                Ok(unsafe { OwnedFd::from_raw_fd(raw) })
            })
            .join()
            .map_err(|_| anyhow::anyhow!("netlink thread panicked"))?
        })?;
        // A reply that never comes must not stall an interval.
        let tv = libc::timeval { tv_sec: 1, tv_usec: 0 };
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
        Ok(DeviceWatch { sock, name: iface.name.clone(), ifindex: iface.ifindex, netns, seq: 0 })
    }

    /// Is the interface still there? An error only when the kernel could not be asked.
    pub fn check(&mut self) -> Result<Presence> {
        if let Some((name, path, inode)) = &self.netns {
            match std::fs::metadata(path) {
                Ok(m) if m.ino() as u32 == *inode => {}
                Ok(_) => return Ok(Presence::Gone(format!("network namespace '{name}' was deleted and made anew"))),
                Err(_) => return Ok(Presence::Gone(format!("network namespace '{name}' was deleted"))),
            }
        }
        self.seq = self.seq.wrapping_add(1);
        let req = getlink_request(self.ifindex, self.seq);
        // SAFETY: a valid socket and a buffer of the length given.
        let sent = unsafe { libc::send(self.sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
        if sent < 0 {
            bail!("asking netlink for interface {}: {}", self.name, std::io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 8192];
        loop {
            // SAFETY: a valid socket and a buffer of the length given.
            let n = unsafe { libc::recv(self.sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                bail!("reading netlink's answer about interface {}: {}", self.name, std::io::Error::last_os_error());
            }
            let reply = &buf[..n as usize];
            // Skip answers to earlier requests (one that timed out may arrive late).
            if reply.len() >= 12 && u32::from_ne_bytes(reply[8..12].try_into()?) != self.seq {
                continue;
            }
            return Ok(match parse_getlink_reply(reply)? {
                None => Presence::Gone(format!("interface {} was removed", self.name)),
                Some(n) if !n.is_empty() && n != self.name => {
                    Presence::Gone(format!("interface {} was removed (its index now names {n})", self.name))
                }
                Some(_) => Presence::Present,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut m = vec![0u8; NLMSG_HDR];
        m[0..4].copy_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn no_such_device_and_a_link_are_told_apart() {
        let enodev = reply(NLMSG_ERROR, &(-libc::ENODEV).to_ne_bytes());
        assert_eq!(parse_getlink_reply(&enodev).unwrap(), None);
        let eperm = reply(NLMSG_ERROR, &(-libc::EPERM).to_ne_bytes());
        assert!(parse_getlink_reply(&eperm).is_err());
        let mut body = vec![0u8; IFINFOMSG];
        // IFLA_IFNAME "ddrcv\0", padded to 4.
        body.extend_from_slice(&10u16.to_ne_bytes());
        body.extend_from_slice(&IFLA_IFNAME.to_ne_bytes());
        body.extend_from_slice(b"ddrcv\0\0\0");
        assert_eq!(parse_getlink_reply(&reply(RTM_NEWLINK, &body)).unwrap(), Some("ddrcv".into()));
        assert!(parse_getlink_reply(&[1, 2, 3]).is_err());
        assert!(parse_getlink_reply(&reply(99, &[])).is_err());
    }

    #[test]
    fn the_request_names_the_index() {
        let r = getlink_request(7, 3);
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), RTM_GETLINK);
        assert_eq!(i32::from_ne_bytes(r[20..24].try_into().unwrap()), 7);
    }
}
